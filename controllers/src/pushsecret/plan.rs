//! Pure planning for a PushSecret: from its spec and a source Secret's data to the values one
//! store gets (`dataTo` rules first, then `data` entries, as ESO orders them), from what was
//! pushed before to what must be deleted, and which PushSecrets keep a store from going.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use api::external_secret::SecretStoreKind;
use api::push_secret::{
    PushSecret, PushSecretConversionStrategy, PushSecretData, PushSecretDataTo,
    PushSecretDeletionPolicy, PushSecretMatch, PushSecretRemoteRef, PushSecretSpec,
    PushSecretStoreRef,
};
use clientmanager::{LoadedStore, StoreKind};
use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};
use provider::{PushRemoteRef, PushRequest};
use regex::Regex;

use crate::rename::{Rename, RenameError};

/// A refusal: the field at fault and why. Names keys, never values.
pub type Invalid = (String, String);

/// `status.syncedPushSecrets`: `Kind/name` of a store → status key → the entry pushed there.
pub type Synced = BTreeMap<String, BTreeMap<String, PushSecretData>>;

/// One value to push, with the entry status records for it and the field it comes from.
#[derive(Clone, Debug, PartialEq)]
pub struct Push {
    pub request: PushRequest,
    pub entry: PushSecretData,
    /// `spec.data[j]` or `spec.dataTo[i]`, for messages.
    pub origin: String,
}

/// A store as the plan sees it: `dataTo[].storeRef` picks stores by name or by label.
#[derive(Clone, Copy, Debug)]
pub struct Store<'a> {
    pub kind: StoreKind,
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
}

impl<'a> Store<'a> {
    pub fn of(store: &'a LoadedStore) -> Self {
        Self {
            kind: store.kind,
            name: &store.name,
            labels: &store.labels,
        }
    }

    /// ESO's key of `status.syncedPushSecrets`.
    pub fn status_key(&self) -> String {
        store_key(self.kind, self.name)
    }

    /// Whether `r` names this store, or selects it by its labels (of `r`'s kind either way).
    pub fn matches(&self, r: &PushSecretStoreRef) -> bool {
        if ref_kind(r) != self.kind {
            return false;
        }
        match (&r.name, &r.label_selector) {
            (Some(name), _) if !name.is_empty() => name == self.name,
            (_, Some(selector)) => {
                Selector::try_from(selector.clone()).is_ok_and(|s| s.matches(self.labels))
            }
            _ => false,
        }
    }
}

/// ESO's key of `status.syncedPushSecrets` for the store `kind`/`name`.
pub fn store_key(kind: StoreKind, name: &str) -> String {
    format!("{kind}/{name}")
}

pub(crate) fn ref_kind(r: &PushSecretStoreRef) -> StoreKind {
    StoreKind::parse(r.kind.map(SecretStoreKind::as_str))
}

/// A source Secret after the template; its name is for messages.
#[derive(Clone, Copy, Debug)]
pub struct Source<'a> {
    pub name: &'a str,
    pub data: &'a BTreeMap<String, Vec<u8>>,
}

/// ESO's key in `status.syncedPushSecrets[store]`: the remote key, and the property if any.
pub fn status_key(entry: &PushSecretData) -> String {
    let remote = &entry.match_.remote_ref;
    match &remote.property {
        Some(p) if !p.is_empty() => format!("{}/{p}", remote.remote_key),
        _ => remote.remote_key.clone(),
    }
}

/// Features refused with a condition naming the field rather than half done.
pub fn unsupported(ps: &PushSecret) -> Result<(), Invalid> {
    if ps.spec.selector.generator_ref.is_some() {
        return Err((
            "spec.selector.generatorRef".into(),
            "generators are not supported yet".into(),
        ));
    }
    Ok(())
}

/// ESO's `ReverseUnicode`: every `_UXXXX_` (four or five hex digits) back to its character, the
/// reverse of an ExternalSecret's `conversionStrategy: Unicode`.
pub fn reverse_unicode(key: &str) -> String {
    static ESCAPE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new("_U([0-9a-fA-F]{4,5})_").expect("a valid pattern"));
    ESCAPE
        .replace_all(key, |c: &regex::Captures<'_>| {
            let code = u32::from_str_radix(&c[1], 16).unwrap_or_default();
            // Go prints a surrogate as U+FFFD, so ESO pushes that rather than failing.
            char::from_u32(code)
                .unwrap_or(char::REPLACEMENT_CHARACTER)
                .to_string()
        })
        .into_owned()
}

/// The source's keys after `strategy`, each to the key it came from. Two keys that become one
/// are refused naming both, as ESO does.
fn converted<'a>(
    strategy: Option<PushSecretConversionStrategy>,
    source: &Source<'a>,
    field: &str,
) -> Result<BTreeMap<String, &'a str>, Invalid> {
    let mut out = BTreeMap::new();
    for key in source.data.keys() {
        let new = match strategy {
            Some(PushSecretConversionStrategy::ReverseUnicode) => reverse_unicode(key),
            _ => key.clone(),
        };
        if let Some(earlier) = out.insert(new.clone(), key.as_str()) {
            return Err((
                format!("{field}.conversionStrategy"),
                format!(
                    "keys {earlier:?} and {key:?} of Secret {:?} both become {new:?}",
                    source.name
                ),
            ));
        }
    }
    Ok(out)
}

/// The whole Secret (or a bundle of its keys) as one JSON object of strings.
fn json_object<'a>(
    entries: impl Iterator<Item = (&'a String, &'a [u8])>,
    source: &Source<'_>,
    field: &str,
) -> Result<Vec<u8>, Invalid> {
    provider::whole_secret_json(entries).map_err(|k| {
        (
            field.to_owned(),
            format!(
                "key {k:?} of Secret {:?} is not UTF-8, so it cannot be pushed in a JSON object; push it by key",
                source.name
            ),
        )
    })
}

fn push(origin: &str, entry: PushSecretData, value: Vec<u8>) -> Push {
    Push {
        origin: origin.to_owned(),
        request: PushRequest {
            remote: PushRemoteRef {
                remote_key: entry.match_.remote_ref.remote_key.clone(),
                property: entry.match_.remote_ref.property.clone(),
            },
            secret_key: entry.match_.secret_key.clone().filter(|k| !k.is_empty()),
            value,
            metadata: entry.metadata.clone(),
            // The caller knows the source Secret's type and metadata.
            source: Default::default(),
        },
        entry,
    }
}

/// ESO's checks of `dataTo[].storeRef`: a store named there is one of `secretStoreRefs` (by
/// name), and a label selector selects at least one of `stores`, the stores pushed to; either
/// mistake would otherwise push nothing without a word.
pub fn check_data_to_stores(spec: &PushSecretSpec, stores: &[Store<'_>]) -> Result<(), Invalid> {
    for (i, rule) in spec.data_to().iter().enumerate() {
        let field = format!("spec.dataTo[{i}].storeRef");
        let r = &rule.store_ref;
        match (&r.name, &r.label_selector) {
            (Some(name), _) if !name.is_empty() => {
                let listed = spec.secret_store_refs.iter().any(|s| {
                    s.name.as_deref() == Some(name.as_str()) && ref_kind(s) == ref_kind(r)
                });
                if !listed {
                    return Err((
                        format!("{field}.name"),
                        format!(
                            "{} {name:?} is not one of spec.secretStoreRefs",
                            ref_kind(r)
                        ),
                    ));
                }
            }
            (_, Some(selector)) => {
                Selector::try_from(selector.clone())
                    .map_err(|e| (format!("{field}.labelSelector"), e.to_string()))?;
                if !stores.iter().any(|s| s.matches(r)) {
                    return Err((
                        format!("{field}.labelSelector"),
                        "selects none of the stores of spec.secretStoreRefs".into(),
                    ));
                }
            }
            _ => return Err((field, "set name or labelSelector".into())),
        }
    }
    Ok(())
}

/// What `store` gets from one source Secret: the `dataTo` rules that target it, in order, then
/// every `data` entry. A `data` entry overrides a `dataTo` rule for the same source key; two
/// values for one remote key (and property) are refused.
pub fn pushes(
    spec: &PushSecretSpec,
    store: Store<'_>,
    source: &Source<'_>,
) -> Result<Vec<Push>, Invalid> {
    let mut bulk = Vec::new();
    for (i, rule) in spec.data_to().iter().enumerate() {
        if store.matches(&rule.store_ref) {
            bulk.extend(expand(rule, &format!("spec.dataTo[{i}]"), source)?);
        }
    }
    // ESO refuses duplicates among the rules before data entries override any of them.
    unique(&bulk)?;
    let mut explicit = Vec::new();
    let mut overridden = BTreeSet::new();
    for (j, entry) in spec.data().iter().enumerate() {
        let field = format!("spec.data[{j}]");
        let (planned, original) = explicit_push(entry, &field, source)?;
        overridden.extend(original);
        explicit.push(planned);
    }
    // A bundle names no single key, so no data entry overrides it (ESO drops every bundle when
    // some data entry pushes the whole Secret, which looks unintended).
    bulk.retain(|p| {
        p.entry
            .match_
            .secret_key
            .as_ref()
            .is_none_or(|k| !overridden.contains(k))
    });
    bulk.extend(explicit);
    unique(&bulk)?;
    Ok(bulk)
}

/// One `dataTo` rule: each matching key on its own (renamed by `rewrite`), or all of them as one
/// JSON object at `remoteKey`. Keys are matched and renamed after the conversion strategy; the
/// entries recorded name the Secret's own key, as ESO records them.
fn expand(rule: &PushSecretDataTo, field: &str, source: &Source<'_>) -> Result<Vec<Push>, Invalid> {
    let keys = converted(rule.conversion_strategy, source, field)?;
    let pattern = rule
        .match_
        .as_ref()
        .and_then(|m| m.regexp.as_deref())
        .filter(|r| !r.is_empty())
        .map(|r| Regex::new(r).map_err(|e| (format!("{field}.match.regexp"), e.to_string())))
        .transpose()?;
    let matched: Vec<(&String, &str)> = keys
        .iter()
        .filter(|(k, _)| pattern.as_ref().is_none_or(|p| p.is_match(k)))
        .map(|(k, original)| (k, *original))
        .collect();
    if matched.is_empty() {
        return Ok(Vec::new());
    }
    let entry = |secret_key: Option<String>, remote_key: String| PushSecretData {
        match_: PushSecretMatch {
            secret_key,
            remote_ref: PushSecretRemoteRef {
                remote_key,
                property: None,
            },
        },
        metadata: rule.metadata.clone(),
        // Already applied: the entry names the Secret's own key.
        conversion_strategy: Some(PushSecretConversionStrategy::None),
    };
    let rewrite = rule.rewrite.as_deref().unwrap_or_default();
    if let Some(bundle) = rule.remote_key.as_deref().filter(|k| !k.is_empty()) {
        if !rewrite.is_empty() {
            return Err((
                format!("{field}.rewrite"),
                "remoteKey and rewrite are mutually exclusive: rewrite renames keys pushed one by one".into(),
            ));
        }
        let value = json_object(
            matched
                .iter()
                .map(|(k, original)| (*k, source.data[*original].as_slice())),
            source,
            &format!("{field}.remoteKey"),
        )?;
        return Ok(vec![push(field, entry(None, bundle.to_owned()), value)]);
    }
    let steps = rewrite
        .iter()
        .enumerate()
        .map(|(j, s)| {
            Rename::new(
                s.regexp.as_ref(),
                s.transform.as_ref(),
                &format!("{field}.rewrite[{j}]"),
            )
        })
        .filter_map(Result::transpose)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| match e {
            RenameError::Invalid { field, message } => (field, message),
            RenameError::Template(e) => (e.field, e.message),
        })?;
    let mut out = Vec::new();
    for (key, original) in matched {
        let mut remote = key.clone();
        for step in &steps {
            remote = step.apply(&remote).map_err(|e| (e.field, e.message))?;
        }
        if remote.is_empty() {
            return Err((
                format!("{field}.rewrite"),
                format!("key {key:?} is renamed to an empty remote key"),
            ));
        }
        out.push(push(
            field,
            entry(Some(original.to_owned()), remote),
            source.data[original].clone(),
        ));
    }
    Ok(out)
}

/// One `data` entry and the source key it pushes (none for the whole Secret). `secretKey` names
/// a key after the entry's conversion strategy, as in ESO.
fn explicit_push(
    entry: &PushSecretData,
    field: &str,
    source: &Source<'_>,
) -> Result<(Push, Option<String>), Invalid> {
    let keys = converted(entry.conversion_strategy, source, field)?;
    match entry.match_.secret_key.as_deref().filter(|k| !k.is_empty()) {
        Some(k) => {
            let original = keys.get(k).ok_or_else(|| {
                (
                    format!("{field}.match.secretKey"),
                    format!("the source Secret {:?} has no key {k:?}", source.name),
                )
            })?;
            let value = source.data[*original].clone();
            Ok((
                push(field, entry.clone(), value),
                Some((*original).to_owned()),
            ))
        }
        None => {
            let value = json_object(
                keys.iter()
                    .map(|(k, original)| (k, source.data[*original].as_slice())),
                source,
                &format!("{field}.match.secretKey"),
            )?;
            Ok((push(field, entry.clone(), value), None))
        }
    }
}

/// Refuses two pushes to one remote key and property, naming both origins.
fn unique(planned: &[Push]) -> Result<(), Invalid> {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for p in planned {
        let origin = match &p.entry.match_.secret_key {
            Some(k) => format!("{} (key {k:?})", p.origin),
            None => p.origin.clone(),
        };
        if let Some(earlier) = seen.insert(status_key(&p.entry), origin.clone()) {
            return Err((
                p.origin.clone(),
                format!(
                    "{origin} and {earlier} both push to remote key {:?}",
                    status_key(&p.entry)
                ),
            ));
        }
    }
    Ok(())
}

/// The pushes of several source Secrets (selected by label) to one store: a remote key two of
/// them push to gets the later Secret's value, as in ESO, but is written once.
pub fn last_wins(pushes: impl IntoIterator<Item = Push>) -> Vec<Push> {
    let mut out: Vec<Push> = Vec::new();
    let mut at: BTreeMap<String, usize> = BTreeMap::new();
    for p in pushes {
        match at.get(&status_key(&p.entry)) {
            Some(&i) => out[i] = p,
            None => {
                at.insert(status_key(&p.entry), out.len());
                out.push(p);
            }
        }
    }
    out
}

/// Entries pushed before (store → status key → entry) that are no longer pushed now.
pub fn stale(before: &Synced, now: &Synced) -> Vec<(String, PushSecretData)> {
    let mut out = Vec::new();
    for (store, entries) in before {
        let kept: BTreeSet<&String> = now
            .get(store)
            .map(|e| e.keys().collect())
            .unwrap_or_default();
        for (key, entry) in entries {
            if !kept.contains(key) {
                out.push((store.clone(), entry.clone()));
            }
        }
    }
    out
}

/// What `now` pushed, plus what `before` recorded that `now` does not replace: after a failure,
/// what was pushed earlier stays on record until it is deleted.
pub fn merged(now: &Synced, before: &Synced) -> Synced {
    let mut out = before.clone();
    for (store, entries) in now {
        out.entry(store.clone())
            .or_default()
            .extend(entries.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    out
}

/// What of a PushSecret decides which stores it uses: those its `secretStoreRefs` name or
/// select, and those holding entries it pushed.
#[derive(Clone, Debug, PartialEq)]
pub struct Uses {
    pub namespace: Option<String>,
    pub delete: bool,
    pub refs: Vec<PushSecretStoreRef>,
    /// Keys of `status.syncedPushSecrets`.
    pub synced: BTreeSet<String>,
}

impl Uses {
    pub fn of(ps: &PushSecret) -> Self {
        Self {
            namespace: ps.namespace(),
            delete: ps.spec.deletion_policy() == PushSecretDeletionPolicy::Delete,
            refs: ps.spec.secret_store_refs.clone(),
            synced: ps
                .status
                .as_ref()
                .and_then(|s| s.synced_push_secrets.as_ref())
                .map(|s| s.keys().cloned().collect())
                .unwrap_or_default(),
        }
    }

    /// Whether `secretStoreRefs` names or selects `store` (in `namespace`; `None` for a
    /// ClusterSecretStore).
    pub fn references(&self, store: Store<'_>, namespace: Option<&str>) -> bool {
        self.in_scope(store, namespace) && self.refs.iter().any(|r| store.matches(r))
    }

    /// Whether entries pushed to `store` are on record.
    pub fn pushed_to(&self, store: Store<'_>, namespace: Option<&str>) -> bool {
        self.in_scope(store, namespace) && self.synced.contains(&store.status_key())
    }

    /// ESO's rule for a store's finalizer: a PushSecret with deletionPolicy Delete that pushes
    /// to the store, or will, keeps it until what it pushed there is deleted.
    pub fn holds(&self, store: Store<'_>, namespace: Option<&str>) -> bool {
        self.delete && (self.pushed_to(store, namespace) || self.references(store, namespace))
    }

    /// A SecretStore serves PushSecrets of its own namespace; a ClusterSecretStore, all of them.
    fn in_scope(&self, store: Store<'_>, namespace: Option<&str>) -> bool {
        store.kind == StoreKind::ClusterSecretStore || self.namespace.as_deref() == namespace
    }
}

#[cfg(test)]
mod tests;
