//! The process's one watch of CustomResourceDefinitions. The conversion webhook (on every
//! replica) follows the CRDs it converts, whole; the provider discovery (on the leader, from the
//! moment it leads) reads what it needs of the provider CRDs from a catalog kept since the
//! process started. A start lists the CRDs once, where each of them used to list them all.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::channel::mpsc;
use futures::{Stream, StreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch_crds};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tokio::task::AbortHandle;

type Crd = CustomResourceDefinition;
type Wants = Box<dyn Fn(&Crd) -> bool + Send + Sync>;

/// CRDs are listed this many at a time: with their schemas they can weigh hundreds of KiB, and
/// a cluster with thousands of them would have 500 in memory at once while the list passes.
const PAGE: u32 = 50;

/// What the provider discovery needs of a CRD, without its schemas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub group: String,
    pub kind: String,
    /// Its `Established` condition is True: its objects can be listed and watched.
    pub established: bool,
    /// The version its objects are stored at.
    pub storage_version: Option<String>,
    /// The versions the API server serves, in the CRD's order.
    pub served: Vec<String>,
}

impl Summary {
    fn of(crd: &Crd) -> Self {
        let established = crd
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
        Self {
            group: crd.spec.group.clone(),
            kind: crd.spec.names.kind.clone(),
            established,
            storage_version: crd
                .spec
                .versions
                .iter()
                .find(|v| v.storage)
                .map(|v| v.name.clone()),
            served: crd
                .spec
                .versions
                .iter()
                .filter(|v| v.served)
                .map(|v| v.name.clone())
                .collect(),
        }
    }
}

/// The summaries of the CRDs a catalog keeps, by name; `None` until the first list is in.
pub type Listing = Option<BTreeMap<String, Summary>>;

/// A catalog's reader: its latest listing, and a wake-up at each change of it.
pub type Catalog = watch::Receiver<Listing>;

/// The watch, and who its events go to. Everyone registers before it [`run`](Self::run)s, so
/// that each sees the first list.
pub struct CrdWatch {
    client: Client,
    fanout: Fanout,
}

impl CrdWatch {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            fanout: Fanout::default(),
        }
    }

    /// The events of the CRDs `wants` accepts, whole, with the lists' `Init` and `InitDone`.
    pub fn follow(&mut self, wants: impl Fn(&Crd) -> bool + Send + Sync + 'static) -> Followed {
        self.fanout.follow(Box::new(wants))
    }

    /// The summaries of the CRDs `wants` accepts, kept current.
    pub fn catalog(&mut self, wants: impl Fn(&Crd) -> bool + Send + Sync + 'static) -> Catalog {
        self.fanout.catalog(Box::new(wants))
    }

    /// Watches until no follower and no catalog reader is left; a failed watch is retried
    /// with backoff, and said so: no provider kind is watched and no CA bundle checked before
    /// the first list is in.
    pub async fn run(self) {
        let Self { client, mut fanout } = self;
        let config = watcher::Config::default().page_size(PAGE);
        let mut events = watch_crds(Api::<Crd>::all(client), config)
            .default_backoff()
            .boxed();
        while fanout.listened() {
            match events.next().await {
                Some(Ok(event)) => fanout.apply(event),
                Some(Err(e)) => tracing::warn!(
                    error = %e,
                    "watching CRDs; the provider controllers and the webhook's CA bundles wait for it"
                ),
                None => return,
            }
        }
    }
}

/// A follower's events: a stream that ends when the watch does.
pub struct Followed {
    events: mpsc::UnboundedReceiver<Event<Crd>>,
    /// The watch this follower has to itself, stopped with it.
    own: Option<AbortHandle>,
}

impl Followed {
    /// A watch of its own for one follower: a webhook alone in its process, or in a test.
    pub fn alone(client: Client, wants: impl Fn(&Crd) -> bool + Send + Sync + 'static) -> Self {
        let mut crds = CrdWatch::new(client);
        let mut followed = crds.follow(wants);
        followed.own = Some(tokio::spawn(crds.run()).abort_handle());
        followed
    }
}

impl Drop for Followed {
    fn drop(&mut self) {
        if let Some(own) = &self.own {
            own.abort();
        }
    }
}

impl Stream for Followed {
    type Item = Event<Crd>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.events.poll_next_unpin(cx)
    }
}

struct Follower {
    wants: Wants,
    events: mpsc::UnboundedSender<Event<Crd>>,
}

struct Kept {
    wants: Wants,
    listing: watch::Sender<Listing>,
    /// The summaries of a list under way, which replace the listing when it is through.
    relist: Option<BTreeMap<String, Summary>>,
}

impl Kept {
    fn apply(&mut self, event: &Event<Crd>) {
        match event {
            Event::Init => self.relist = Some(BTreeMap::new()),
            Event::InitApply(crd) => {
                if let Some(relist) = self.relist.as_mut().filter(|_| (self.wants)(crd)) {
                    relist.insert(crd.name_any(), Summary::of(crd));
                }
            }
            Event::InitDone => {
                let listed = self.relist.take().unwrap_or_default();
                // A re-list that finds what was known wakes no reader.
                self.listing.send_if_modified(|listing| {
                    let changed = listing.as_ref() != Some(&listed);
                    *listing = Some(listed);
                    changed
                });
            }
            Event::Apply(crd) if (self.wants)(crd) => {
                let (name, summary) = (crd.name_any(), Summary::of(crd));
                self.listing.send_if_modified(|listing| {
                    let listing = listing.get_or_insert_default();
                    let changed = listing.get(&name) != Some(&summary);
                    listing.insert(name, summary);
                    changed
                });
            }
            Event::Delete(crd) if (self.wants)(crd) => {
                self.listing.send_if_modified(|listing| {
                    listing
                        .as_mut()
                        .is_some_and(|l| l.remove(&crd.name_any()).is_some())
                });
            }
            Event::Apply(_) | Event::Delete(_) => {}
        }
    }
}

#[derive(Default)]
struct Fanout {
    followers: Vec<Follower>,
    catalogs: Vec<Kept>,
}

impl Fanout {
    fn follow(&mut self, wants: Wants) -> Followed {
        let (events, received) = mpsc::unbounded();
        self.followers.push(Follower { wants, events });
        Followed {
            events: received,
            own: None,
        }
    }

    fn catalog(&mut self, wants: Wants) -> Catalog {
        let (listing, catalog) = watch::channel(None);
        self.catalogs.push(Kept {
            wants,
            listing,
            relist: None,
        });
        catalog
    }

    fn listened(&self) -> bool {
        !self.followers.is_empty() || self.catalogs.iter().any(|c| !c.listing.is_closed())
    }

    fn apply(&mut self, event: Event<Crd>) {
        for catalog in &mut self.catalogs {
            catalog.apply(&event);
        }
        self.followers.retain(|follower| {
            let wanted = match &event {
                Event::Init | Event::InitDone => true,
                Event::InitApply(crd) | Event::Apply(crd) | Event::Delete(crd) => {
                    (follower.wants)(crd)
                }
            };
            !wanted || follower.events.unbounded_send(event.clone()).is_ok()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceDefinitionCondition, CustomResourceDefinitionNames,
        CustomResourceDefinitionSpec, CustomResourceDefinitionStatus,
        CustomResourceDefinitionVersion,
    };
    use kube::api::ObjectMeta;

    fn crd(group: &str, kind: &str, established: bool) -> Crd {
        Crd {
            metadata: ObjectMeta {
                name: Some(format!("{}s.{group}", kind.to_lowercase())),
                ..ObjectMeta::default()
            },
            spec: CustomResourceDefinitionSpec {
                group: group.into(),
                names: CustomResourceDefinitionNames {
                    kind: kind.into(),
                    plural: format!("{}s", kind.to_lowercase()),
                    ..Default::default()
                },
                scope: "Namespaced".into(),
                versions: vec![
                    CustomResourceDefinitionVersion {
                        name: "v1alpha1".into(),
                        served: true,
                        storage: false,
                        ..Default::default()
                    },
                    CustomResourceDefinitionVersion {
                        name: "v1beta1".into(),
                        served: true,
                        storage: true,
                        ..Default::default()
                    },
                ],
                ..Default::default()
            },
            status: Some(CustomResourceDefinitionStatus {
                conditions: Some(vec![CustomResourceDefinitionCondition {
                    type_: "Established".into(),
                    status: if established { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn ours(crd: &Crd) -> bool {
        crd.spec.group.ends_with("external-secrets.io")
    }

    fn names(listing: &Listing) -> Option<Vec<(String, bool)>> {
        listing.as_ref().map(|l| {
            l.iter()
                .map(|(name, s)| (name.clone(), s.established))
                .collect()
        })
    }

    /// Each reader gets what it asked for of the same events: the follower the whole CRDs it
    /// wants and the lists' bounds, the catalog a summary of its CRDs once the list is through.
    #[test]
    fn one_watch_serves_a_follower_and_a_catalog() {
        let mut fanout = Fanout::default();
        let mut followed = fanout.follow(Box::new(|crd: &Crd| crd.spec.names.kind == "Vault"));
        let mut catalog = fanout.catalog(Box::new(ours));
        let (vault, gitlab) = (
            crd("providers.external-secrets.io", "Vault", true),
            crd("providers.external-secrets.io", "Gitlab", false),
        );
        let other = crd("example.com", "Widget", true);
        fanout.apply(Event::Init);
        for crd in [&vault, &gitlab, &other] {
            fanout.apply(Event::InitApply(crd.clone()));
        }
        assert!(
            names(&catalog.borrow_and_update()).is_none(),
            "a catalog is listed only when the list is through"
        );
        fanout.apply(Event::InitDone);
        assert!(catalog.has_changed().unwrap());
        assert_eq!(
            names(&catalog.borrow_and_update()),
            Some(vec![
                ("gitlabs.providers.external-secrets.io".into(), false),
                ("vaults.providers.external-secrets.io".into(), true),
            ])
        );
        let summary = catalog
            .borrow()
            .as_ref()
            .and_then(|l| l.get("vaults.providers.external-secrets.io").cloned());
        assert_eq!(
            summary,
            Some(Summary {
                group: "providers.external-secrets.io".into(),
                kind: "Vault".into(),
                established: true,
                storage_version: Some("v1beta1".into()),
                served: vec!["v1alpha1".into(), "v1beta1".into()],
            })
        );

        // Established later: the catalog changes; another CRD's event reaches no one.
        fanout.apply(Event::Apply(crd(
            "providers.external-secrets.io",
            "Gitlab",
            true,
        )));
        fanout.apply(Event::Apply(other.clone()));
        assert!(catalog.has_changed().unwrap());
        assert_eq!(
            names(&catalog.borrow_and_update()).unwrap()[0],
            ("gitlabs.providers.external-secrets.io".into(), true)
        );
        // A re-list that finds the same CRDs wakes no reader.
        fanout.apply(Event::Init);
        for crd in [
            &vault,
            &crd("providers.external-secrets.io", "Gitlab", true),
        ] {
            fanout.apply(Event::InitApply(crd.clone()));
        }
        fanout.apply(Event::InitDone);
        assert!(!catalog.has_changed().unwrap());
        fanout.apply(Event::Delete(vault.clone()));
        assert_eq!(
            names(&catalog.borrow_and_update()),
            Some(vec![("gitlabs.providers.external-secrets.io".into(), true)])
        );

        let mut seen = Vec::new();
        while let Ok(event) = followed.events.try_recv() {
            seen.push(match event {
                Event::Init => "Init".to_owned(),
                Event::InitApply(crd) => format!("InitApply {}", crd.spec.names.kind),
                Event::InitDone => "InitDone".to_owned(),
                Event::Apply(crd) => format!("Apply {}", crd.spec.names.kind),
                Event::Delete(crd) => format!("Delete {}", crd.spec.names.kind),
            });
        }
        assert_eq!(
            seen,
            [
                "Init",
                "InitApply Vault",
                "InitDone",
                "Init",
                "InitApply Vault",
                "InitDone",
                "Delete Vault"
            ]
        );
    }

    #[test]
    fn a_watch_nobody_reads_ends() {
        let mut fanout = Fanout::default();
        let followed = fanout.follow(Box::new(|_: &Crd| true));
        let catalog = fanout.catalog(Box::new(|_: &Crd| true));
        assert!(fanout.listened());
        drop(catalog);
        assert!(fanout.listened(), "the follower still reads");
        drop(followed);
        fanout.apply(Event::Init);
        assert!(
            !fanout.listened(),
            "a follower gone is dropped at the next event"
        );
    }
}
