//! Whole `Gitlab` objects between `v1alpha1` and `v1beta1`, in both groups, losing nothing
//! ([`crate::conversion`] does the converting; this module says how the specs map).
//!
//! Fields move or are renamed (`auth.SecretRef` ↔ `auth.secretRef`, `projectID` ↔ `project`,
//! `groupIDs` ↔ `groups.ids`, `inheritFromGroups` ↔ `groups.inherit`). v1beta1 holds one of the
//! two group settings, v1alpha1 (like ESO's schema) both: with `inheritFromGroups: true` ESO
//! replaces the list by the project's ancestors, so that is what v1beta1 shows, and the list, or
//! an `inheritFromGroups: false` beside it, rides in the leftover annotation, as does an empty
//! `groups: {}`.

use serde_json::Value;

use super::{GitlabAuth, GitlabProvider, v1beta1};
use crate::conversion::{TwoVersions, Version, merge};

/// On a `v1beta1` object: what its `v1alpha1` original held that `v1beta1` cannot, as a merge
/// patch of the `v1alpha1` spec.
pub const V1ALPHA1_ONLY: &str = "conversion.external-secrets.io/gitlab-v1alpha1";
/// On a `v1alpha1` object: what its `v1beta1` original held that `v1alpha1` cannot, as a merge
/// patch of the `v1beta1` spec.
pub const V1BETA1_ONLY: &str = "conversion.external-secrets.io/gitlab-v1beta1";

/// The `Gitlab` kind's two versions.
pub struct Gitlab;

impl TwoVersions for Gitlab {
    const KIND: &'static str = super::DESCRIPTOR.kind;
    const V1ALPHA1_ONLY: &'static str = V1ALPHA1_ONLY;
    const V1BETA1_ONLY: &'static str = V1BETA1_ONLY;
    type V1alpha1 = GitlabProvider;
    type V1beta1 = v1beta1::GitlabProvider;

    /// The groups ESO would read, alone.
    fn to_beta(alpha: &GitlabProvider) -> v1beta1::GitlabProvider {
        let groups = match (&alpha.group_ids, alpha.inherit_from_groups) {
            (_, Some(true)) | (None, Some(false)) => Some(v1beta1::GitlabGroups {
                ids: None,
                inherit: alpha.inherit_from_groups,
            }),
            (Some(ids), _) => Some(v1beta1::GitlabGroups {
                ids: Some(ids.clone()),
                inherit: None,
            }),
            (None, None) => None,
        };
        v1beta1::GitlabProvider {
            url: alpha.url.clone(),
            auth: v1beta1::GitlabAuth {
                secret_ref: alpha.auth.secret_ref.clone(),
            },
            project: alpha.project_id.clone(),
            groups,
            environment: alpha.environment.clone(),
            ca_bundle: alpha.ca_bundle.clone(),
            ca_provider: alpha.ca_provider.clone(),
        }
    }

    fn to_alpha(beta: &v1beta1::GitlabProvider) -> GitlabProvider {
        let groups = beta.groups.clone().unwrap_or_default();
        GitlabProvider {
            url: beta.url.clone(),
            auth: GitlabAuth {
                secret_ref: beta.auth.secret_ref.clone(),
            },
            project_id: beta.project.clone(),
            inherit_from_groups: groups.inherit,
            group_ids: groups.ids,
            environment: beta.environment.clone(),
            ca_bundle: beta.ca_bundle.clone(),
            ca_provider: beta.ca_provider.clone(),
        }
    }

    /// A leftover written before the object was edited at the other version could change which
    /// groups are read (a stale list replacing the new one), so its group settings are applied
    /// only where they change nothing ESO reads: a list beside `inheritFromGroups: true`, an
    /// explicit `false`, an empty `groups`.
    fn restore(version: Version, spec: &mut Value, mut leftover: Value) {
        let mut restored = spec.clone();
        merge(&mut restored, &leftover);
        if groups_read(version, &restored) != groups_read(version, spec) {
            let group_fields: &[&str] = match version {
                Version::V1alpha1 => &["groupIDs", "inheritFromGroups"],
                Version::V1beta1 => &["groups"],
            };
            if let Some(patch) = leftover.as_object_mut() {
                patch.retain(|key, _| !group_fields.contains(&key.as_str()));
            }
            restored = spec.clone();
            merge(&mut restored, &leftover);
        }
        *spec = restored;
    }
}

/// Which groups a spec of `version` reads variables from.
#[derive(PartialEq)]
enum GroupsRead<'a> {
    Ancestors,
    Listed(&'a [Value]),
}

fn groups_read(version: Version, spec: &Value) -> GroupsRead<'_> {
    let (ids, inherit) = match version {
        Version::V1alpha1 => (&spec["groupIDs"], &spec["inheritFromGroups"]),
        Version::V1beta1 => (&spec["groups"]["ids"], &spec["groups"]["inherit"]),
    };
    if *inherit == true {
        GroupsRead::Ancestors
    } else {
        GroupsRead::Listed(ids.as_array().map_or(&[], Vec::as_slice))
    }
}
