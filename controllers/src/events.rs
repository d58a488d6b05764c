//! Kubernetes events with a bounded memory, published off the reconcile's path. kube's
//! `Recorder` keeps every event it published for six minutes and scans all of them on each
//! publish: with 10k ExternalSecrets syncing at once that held about 29 MiB and grew quadratic in
//! time. Like client-go's recorder, this keeps at most `CAPACITY` recent events, enough to
//! aggregate repeats into a series, and hands each event to a background sender: a reconcile
//! never waits for the API server to store an event (one of its three requests on a first sync),
//! and when the sender falls `QUEUE` events behind, new ones are dropped and counted, as
//! client-go drops them, rather than slowing the reconciles or holding memory without bound.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
pub use kube::runtime::events::EventType;
use serde_json::json;

const CAPACITY: usize = 4096;
/// Events waiting for the sender; a burst of this many is published, a longer one loses events.
const QUEUE: usize = 4096;
/// Events the sender publishes at once, at the least; as many as the reconciles run in parallel
/// otherwise, since each can record one: with 32 workers and 8 in flight, a quarter of a 10k
/// sync's events were still queued when every ExternalSecret was Ready, and a longer backlog
/// than the queue loses them.
const MIN_IN_FLIGHT: usize = 8;
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

/// An event as a reconcile recorded it, waiting for the sender.
struct Pending {
    regarding: ObjectReference,
    type_: EventType,
    reason: String,
    note: String,
    at: Timestamp,
}

/// Where reconciles record events; the sender task publishes them.
pub struct Recorder {
    queue: mpsc::Sender<Pending>,
    dropped: Counter,
}

impl Recorder {
    /// Starts the sender on the current runtime; it ends when the recorder is dropped and what
    /// was queued is published.
    pub fn start(
        client: kube::Client,
        controller: &str,
        instance: Option<String>,
        concurrency: usize,
        dropped: Counter,
    ) -> Self {
        let publisher = Arc::new(Publisher {
            client,
            controller: controller.to_owned(),
            instance: instance.unwrap_or_else(|| controller.to_owned()),
            cache: Mutex::default(),
        });
        let (queue, waiting) = mpsc::channel(QUEUE);
        let sender = futures::stream::unfold(
            waiting,
            |mut waiting: mpsc::Receiver<Pending>| async {
                waiting.recv().await.map(|event| (event, waiting))
            },
        )
        .for_each_concurrent(concurrency.max(MIN_IN_FLIGHT), move |event| {
            let publisher = publisher.clone();
            async move {
                if let Err(e) = publisher.publish(&event).await {
                    tracing::warn!(error = %e, reason = event.reason, "could not publish event");
                }
            }
        });
        tokio::spawn(sender);
        Self { queue, dropped }
    }

    /// Queues an event for the sender; counted and dropped when it is `QUEUE` events behind.
    pub fn record(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let event = Pending {
            regarding: regarding.clone(),
            type_,
            reason: reason.to_owned(),
            note: fit(note),
            at: Timestamp::now(),
        };
        if let Err(mpsc::error::TrySendError::Full(event)) = self.queue.try_send(event) {
            self.dropped.inc();
            tracing::debug!(reason = event.reason, "event dropped: the sender is behind");
        }
    }
}

struct Publisher {
    client: kube::Client,
    controller: String,
    instance: String,
    cache: Mutex<Cache>,
}

impl Publisher {
    async fn publish(&self, event: &Pending) -> Result<(), kube::Error> {
        let Pending {
            regarding,
            type_,
            reason,
            note,
            at: now,
        } = event;
        let (type_, reason, now) = (*type_, reason.as_str(), *now);
        let note = note.clone();
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
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An API server that answers an event's create only when the test lets it; it counts the
    /// requests that came and those it answered.
    fn held_api_server() -> (
        kube::Client,
        Arc<tokio::sync::Semaphore>,
        Arc<AtomicUsize>,
        Arc<AtomicUsize>,
    ) {
        let release = Arc::new(tokio::sync::Semaphore::new(0));
        let (came, answered) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (r, c, a) = (release.clone(), came.clone(), answered.clone());
        let service = tower::service_fn(move |_: http::Request<kube::client::Body>| {
            let (release, came, answered) = (r.clone(), c.clone(), a.clone());
            async move {
                came.fetch_add(1, Ordering::SeqCst);
                release.acquire().await.expect("open").forget();
                answered.fetch_add(1, Ordering::SeqCst);
                let mut response = http::Response::new(kube::client::Body::from(b"{}".to_vec()));
                *response.status_mut() = http::StatusCode::CREATED;
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        (
            kube::Client::new(service, "default"),
            release,
            came,
            answered,
        )
    }

    fn object(n: usize) -> ObjectReference {
        ObjectReference {
            name: Some(format!("es-{n}")),
            namespace: Some("apps".into()),
            uid: Some(format!("uid-{n}")),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn recording_never_waits_for_the_api_server_and_a_backlog_past_the_queue_is_counted() {
        let (client, release, _, answered) = held_api_server();
        let dropped = Counter::default();
        let recorder = Recorder::start(client, "test", None, 1, dropped.clone());
        // The API server answers nothing yet: every record returns at once, the queue fills,
        // and what does not fit is dropped and counted.
        for n in 0..QUEUE + 10 {
            recorder.record(&object(n), EventType::Normal, "Created", "synced".into());
        }
        assert_eq!(dropped.get(), 10);
        release.add_permits(QUEUE);
        tokio::time::timeout(std::time::Duration::from_secs(30), async {
            while answered.load(Ordering::SeqCst) < QUEUE {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("every queued event is published");
        assert_eq!(dropped.get(), 10, "nothing else was dropped");
    }

    #[tokio::test]
    async fn as_many_events_are_in_flight_as_reconciles_run() {
        for (concurrency, in_flight) in [(32, 32), (2, MIN_IN_FLIGHT)] {
            let (client, release, came, _) = held_api_server();
            let recorder = Recorder::start(client, "test", None, concurrency, Counter::default());
            for n in 0..40 {
                recorder.record(&object(n), EventType::Normal, "Created", "synced".into());
            }
            tokio::time::timeout(std::time::Duration::from_secs(10), async {
                while came.load(Ordering::SeqCst) < in_flight {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
            })
            .await
            .unwrap_or_else(|_| panic!("{in_flight} events in flight at once"));
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            assert_eq!(came.load(Ordering::SeqCst), in_flight, "no more than that");
            release.add_permits(40);
        }
    }

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
