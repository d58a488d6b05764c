//! Kubernetes events with a bounded memory. kube's `Recorder` keeps every event it published for
//! six minutes and scans all of them on each publish: with 10k ExternalSecrets syncing at once
//! that held about 29 MiB and grew quadratic in time. Like client-go's recorder, this keeps at
//! most `CAPACITY` recent events, enough to aggregate repeats into a series.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
pub use kube::runtime::events::EventType;
use serde_json::json;

const CAPACITY: usize = 4096;
/// Repeats within this time become a series on the first event.
const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    regarding: String,
    reason: String,
    note: String,
    warning: bool,
}

struct Seen {
    name: String,
    count: i32,
    first: Timestamp,
}

#[derive(Default)]
struct Cache {
    seen: HashMap<Key, Seen>,
    order: VecDeque<Key>,
}

/// events.k8s.io refuses a longer note, and the event with it.
const NOTE_LIMIT: usize = 1024;
/// Ends a note that was cut.
const CUT: &str = "…";

/// `note` within [`NOTE_LIMIT`] bytes, cut on a character boundary and marked when longer.
fn fit(mut note: String) -> String {
    if note.len() > NOTE_LIMIT {
        let end = (0..=NOTE_LIMIT - CUT.len())
            .rev()
            .find(|&i| note.is_char_boundary(i))
            .unwrap_or_default();
        note.truncate(end);
        note.push_str(CUT);
    }
    note
}

pub struct Recorder {
    client: kube::Client,
    controller: String,
    instance: String,
    cache: Mutex<Cache>,
}

impl Recorder {
    pub fn new(client: kube::Client, controller: &str, instance: Option<String>) -> Self {
        Self {
            client,
            controller: controller.to_owned(),
            instance: instance.unwrap_or_else(|| controller.to_owned()),
            cache: Mutex::default(),
        }
    }

    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) -> Result<(), kube::Error> {
        let note = fit(note);
        let now = Timestamp::now();
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let key = Key {
            regarding: regarding.uid.clone().unwrap_or_else(|| {
                format!("{namespace}/{}", regarding.name.clone().unwrap_or_default())
            }),
            reason: reason.to_owned(),
            note: note.clone(),
            warning: type_ == EventType::Warning,
        };
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let repeat = {
            let mut cache = self.cache.lock().expect("event cache poisoned");
            match cache.seen.get_mut(&key) {
                Some(seen) if now.duration_since(seen.first) < SERIES_WINDOW => {
                    seen.count += 1;
                    Some((seen.name.clone(), seen.count))
                }
                _ => None,
            }
        };
        if let Some((name, count)) = repeat {
            let series = EventSeries {
                count,
                last_observed_time: MicroTime(now),
            };
            let patch = json!({"series": series});
            // The event may have expired in the API server meanwhile; then start a new one.
            match events
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) => {
                    tracing::warn!(error = %e, event = name, "could not add to an event series; starting a new event")
                }
            }
        }
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(&self.controller),
            now.as_nanosecond()
        );
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            action: Some(reason.to_owned()),
            reason: Some(reason.to_owned()),
            note: Some(note),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(match type_ {
                EventType::Normal => "Normal".into(),
                EventType::Warning => "Warning".into(),
            }),
            ..Default::default()
        };
        events.create(&PostParams::default(), &event).await?;
        let mut cache = self.cache.lock().expect("event cache poisoned");
        if cache
            .seen
            .insert(
                key.clone(),
                Seen {
                    name,
                    count: 1,
                    first: now,
                },
            )
            .is_none()
        {
            cache.order.push_back(key);
        }
        while cache.order.len() > CAPACITY {
            if let Some(old) = cache.order.pop_front() {
                cache.seen.remove(&old);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_cut_to_what_the_api_server_accepts() {
        let short = "could not write target Secret \"db\"".to_owned();
        assert_eq!(fit(short.clone()), short);
        let exact = "x".repeat(NOTE_LIMIT);
        assert_eq!(fit(exact.clone()), exact);
        for long in [
            "x".repeat(3000),
            "ü".repeat(1000),
            format!("x{}", "€".repeat(600)),
        ] {
            let cut = fit(long.clone());
            assert!(cut.len() <= NOTE_LIMIT, "{} bytes", cut.len());
            assert!(cut.ends_with(CUT), "the cut is marked");
            let kept = cut.strip_suffix(CUT).unwrap();
            assert!(long.starts_with(kept));
            assert!(
                kept.len() + CUT.len() > NOTE_LIMIT - 3,
                "no more is cut than a character needs"
            );
        }
    }
}
