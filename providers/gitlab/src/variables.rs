//! CI/CD variables as GitLab returns them, and ESO's read rules over them: key spelling, the
//! environment fallback, the order project and groups are searched in, `property`, and how
//! `find` merges variables of several scopes and places. Pure: no HTTP here.

use std::collections::BTreeMap;
use std::fmt;

use provider::{Error, FindRequest, Result};
use serde::Deserialize;
use serde_json::Value;

/// The scope GitLab gives a variable for every environment.
pub(crate) const WILDCARD: &str = "*";

/// A variable as the API returns it (lib/api/entities/ci/variable.rb). `Debug` leaves the value
/// out, so a variable can be logged.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct Variable {
    pub key: String,
    /// `null` for a hidden variable.
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default = "wildcard")]
    pub environment_scope: String,
    #[serde(default = "env_var")]
    pub variable_type: String,
    #[serde(default)]
    pub protected: bool,
    #[serde(default)]
    pub masked: bool,
    #[serde(default)]
    pub raw: bool,
    #[serde(default)]
    pub hidden: bool,
    #[serde(default)]
    pub description: Option<String>,
}

fn wildcard() -> String {
    WILDCARD.to_owned()
}

fn env_var() -> String {
    "env_var".to_owned()
}

impl fmt::Debug for Variable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Variable")
            .field("key", &self.key)
            .field("value", &self.value.as_ref().map(|_| "<redacted>"))
            .field("environment_scope", &self.environment_scope)
            .field("variable_type", &self.variable_type)
            .field("protected", &self.protected)
            .field("masked", &self.masked)
            .field("raw", &self.raw)
            .field("hidden", &self.hidden)
            .field("description", &self.description)
            .finish()
    }
}

/// One of `GET /projects/:id/groups` (APIEntitiesPublicGroupDetails), the fields we use.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub(crate) struct ProjectGroup {
    pub id: u64,
    #[serde(default)]
    pub full_path: String,
}

/// Where variables live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    Project(String),
    Group(String),
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Project(id) => write!(f, "project {id:?}"),
            Self::Group(id) => write!(f, "group {id:?}"),
        }
    }
}

/// GitLab keys allow only `A-Z a-z 0-9 _`; ESO turns the `-` of Kubernetes-style names into `_`.
pub(crate) fn variable_key(remote_key: &str) -> String {
    remote_key.replace('-', "_")
}

/// An empty environment and `*` both mean "no particular environment".
pub(crate) fn is_empty_or_wildcard(environment: &str) -> bool {
    environment.is_empty() || environment == WILDCARD
}

/// The `filter[environment_scope]` values a single-variable read tries, in order: none without
/// an environment (GitLab answers 409 if the key has several scopes), the environment itself,
/// then `*` when the environment is a specific one.
pub(crate) fn scope_filters(environment: Option<&str>) -> Vec<Option<String>> {
    match environment.filter(|e| !e.is_empty()) {
        None => vec![None],
        Some(WILDCARD) => vec![Some(WILDCARD.to_owned())],
        Some(e) => vec![Some(e.to_owned()), Some(WILDCARD.to_owned())],
    }
}

/// The groups discovered with `inheritFromGroups`, in ESO's order: by the length of their full
/// path, so the root group comes first and the project's own group last.
pub(crate) fn ancestor_ids(mut groups: Vec<ProjectGroup>) -> Vec<String> {
    groups.sort_by_key(|g| g.full_path.len());
    groups.into_iter().map(|g| g.id.to_string()).collect()
}

/// Where `get_secret` looks, in order: the project, then the groups from last to first (the
/// nearest group first when they were discovered).
pub(crate) fn lookup_order(project: Option<&str>, groups: &[String]) -> Vec<Place> {
    project
        .map(|p| Place::Project(p.to_owned()))
        .into_iter()
        .chain(groups.iter().rev().map(|g| Place::Group(g.clone())))
        .collect()
}

/// A variable's value, or the `property` inside its JSON value. An empty or hidden value is an
/// error, as a missing property is; messages name the key and property, never the value.
pub(crate) fn extract(variable: &Variable, property: Option<&str>) -> Result<Vec<u8>> {
    let key = &variable.key;
    let Some(value) = variable.value.as_deref() else {
        return Err(Error::Backend(format!(
            "variable {key} is hidden: GitLab never returns its value"
        )));
    };
    match property.filter(|p| !p.is_empty()) {
        None if value.is_empty() => Err(Error::Backend(format!(
            "invalid secret received: variable {key} has an empty value"
        ))),
        None => Ok(value.as_bytes().to_vec()),
        Some(property) => provider::json_path::property(value, property).ok_or_else(|| {
            Error::Backend(format!(
                "property {property:?} does not exist in variable {key}"
            ))
        }),
    }
}

/// ESO's `GetSecretMap`: the value must be a JSON object whose values are all strings.
pub(crate) fn as_map(key: &str, value: &[u8]) -> Result<BTreeMap<String, Vec<u8>>> {
    let not_flat = |why: String| {
        Error::Backend(format!(
            "unable to unmarshal secret from JSON: the value of variable {key} is not a JSON object of strings{why}"
        ))
    };
    let map = provider::json_path::object(value).map_err(not_flat)?;
    map.into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k, s.into_bytes())),
            _ => Err(not_flat(String::new())),
        })
        .collect()
}

/// A checked `find`: the name pattern and the environment variables must match.
#[derive(Debug)]
pub(crate) struct FindQuery {
    pub name: regex::Regex,
    /// Empty or `*`: variables of every scope match.
    pub environment: String,
}

/// ESO's checks on `find`, in its order: `tags` may hold only `environment_scope` and may not
/// name another environment than the store's; `path` is not supported; `name` is required.
pub(crate) fn find_query(find: &FindRequest, store_environment: Option<&str>) -> Result<FindQuery> {
    let store_environment = store_environment.unwrap_or_default();
    let mut environment = store_environment.to_owned();
    if !find.tags.is_empty() {
        if let Some(other) = find.tags.keys().find(|t| *t != "environment_scope") {
            return Err(Error::InvalidSpec(format!(
                "find.tags.{other}: the GitLab provider supports only the tag environment_scope"
            )));
        }
        let tagged = find.tags["environment_scope"].as_str();
        if !is_empty_or_wildcard(store_environment)
            && !is_empty_or_wildcard(tagged)
            && tagged != store_environment
        {
            return Err(Error::InvalidSpec(format!(
                "find.tags.environment_scope: {tagged:?} conflicts with the store's environment {store_environment:?}"
            )));
        }
        environment = tagged.to_owned();
    }
    if find.path.as_deref().is_some_and(|p| !p.is_empty()) {
        return Err(Error::Unsupported {
            provider: "Gitlab".into(),
            operation: "find.path".into(),
        });
    }
    let Some(pattern) = find.name_regexp.as_deref() else {
        return Err(Error::InvalidSpec(
            "find.name.regexp is required by the GitLab provider".into(),
        ));
    };
    let name = regex::Regex::new(pattern)
        .map_err(|e| Error::InvalidSpec(format!("find.name.regexp: {e}")))?;
    Ok(FindQuery { name, environment })
}

impl FindQuery {
    /// Whether `variable` belongs in the result: a wildcard scope always does, a specific one
    /// when the query has no environment or the same one; and the key must match.
    fn matches(&self, variable: &Variable) -> bool {
        let scope = variable.environment_scope.as_str();
        let scope_ok = is_empty_or_wildcard(scope)
            || is_empty_or_wildcard(&self.environment)
            || scope == self.environment;
        scope_ok && !variable.key.is_empty() && self.name.is_match(&variable.key)
    }
}

/// `find`'s result being built. Sources are added groups first, left to right, then the
/// project. A value replaces another of the same key unless the other is more specific: the
/// project beats the groups, then an environment-specific scope beats the wildcard, then a later
/// source (or a later variable of the same source) beats an earlier one.
#[derive(Debug, Default)]
pub(crate) struct Merge {
    chosen: BTreeMap<String, (Rank, Vec<u8>)>,
}

/// Ordered weakest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Rank {
    project: bool,
    specific: bool,
}

impl Merge {
    pub(crate) fn add(&mut self, query: &FindQuery, place: &Place, variables: &[Variable]) {
        for variable in variables {
            if !query.matches(variable) {
                continue;
            }
            // A hidden variable has no value to give.
            let Some(value) = &variable.value else {
                continue;
            };
            let rank = Rank {
                project: matches!(place, Place::Project(_)),
                specific: !is_empty_or_wildcard(&variable.environment_scope),
            };
            match self.chosen.get(&variable.key) {
                Some((held, _)) if *held > rank => {}
                _ => {
                    self.chosen
                        .insert(variable.key.clone(), (rank, value.clone().into_bytes()));
                }
            }
        }
    }

    pub(crate) fn finish(self) -> BTreeMap<String, Vec<u8>> {
        self.chosen.into_iter().map(|(k, (_, v))| (k, v)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn var(key: &str, value: &str, scope: &str) -> Variable {
        Variable {
            key: key.into(),
            value: Some(value.into()),
            environment_scope: scope.into(),
            variable_type: env_var(),
            ..Variable::default()
        }
    }

    fn find(regexp: Option<&str>, tags: &[(&str, &str)], path: Option<&str>) -> FindRequest {
        FindRequest {
            path: path.map(Into::into),
            name_regexp: regexp.map(Into::into),
            tags: tags
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn keys_take_underscores_for_dashes() {
        assert_eq!(variable_key("db-password-2"), "db_password_2");
        assert_eq!(variable_key("PLAIN_KEY"), "PLAIN_KEY");
    }

    #[test]
    fn a_specific_environment_falls_back_to_the_wildcard() {
        assert_eq!(scope_filters(None), vec![None]);
        assert_eq!(scope_filters(Some("")), vec![None]);
        assert_eq!(scope_filters(Some("*")), vec![Some("*".to_owned())]);
        assert_eq!(
            scope_filters(Some("production")),
            vec![Some("production".to_owned()), Some("*".to_owned())]
        );
    }

    #[test]
    fn the_project_comes_first_then_groups_from_last_to_first() {
        let groups = vec!["1".to_owned(), "2".to_owned(), "3".to_owned()];
        assert_eq!(
            lookup_order(Some("p"), &groups),
            vec![
                Place::Project("p".into()),
                Place::Group("3".into()),
                Place::Group("2".into()),
                Place::Group("1".into()),
            ]
        );
        assert_eq!(
            lookup_order(None, &groups[..1]),
            vec![Place::Group("1".into())]
        );
        assert_eq!(
            lookup_order(Some("p"), &[]),
            vec![Place::Project("p".into())]
        );
    }

    #[test]
    fn ancestors_are_ordered_root_first_nearest_last() {
        let groups = vec![
            ProjectGroup {
                id: 30,
                full_path: "org/team/sub".into(),
            },
            ProjectGroup {
                id: 10,
                full_path: "org".into(),
            },
            ProjectGroup {
                id: 20,
                full_path: "org/team".into(),
            },
        ];
        let ids = ancestor_ids(groups);
        assert_eq!(ids, vec!["10", "20", "30"]);
        // get_secret then tries the nearest group first.
        assert_eq!(lookup_order(None, &ids)[0], Place::Group("30".into()));
    }

    #[test]
    fn values_properties_and_their_errors() {
        let plain = var("TOKEN", "s3cr3t", "*");
        assert_eq!(extract(&plain, None).unwrap(), b"s3cr3t");
        assert_eq!(extract(&plain, Some("")).unwrap(), b"s3cr3t");

        let json = var(
            "DB",
            r#"{"user":"alice","port":5432,"nested":{"a.b":"x"}}"#,
            "*",
        );
        assert_eq!(extract(&json, Some("user")).unwrap(), b"alice");
        assert_eq!(extract(&json, Some("port")).unwrap(), b"5432");
        assert_eq!(extract(&json, Some(r"nested.a\.b")).unwrap(), b"x");
        let missing = extract(&json, Some("password")).unwrap_err().to_string();
        assert!(
            missing.contains("property \"password\" does not exist in variable DB"),
            "{missing}"
        );
        assert!(!missing.contains("alice"), "{missing}");

        let empty = extract(&var("EMPTY", "", "*"), None)
            .unwrap_err()
            .to_string();
        assert!(
            empty.contains("variable EMPTY has an empty value"),
            "{empty}"
        );

        let hidden = Variable {
            value: None,
            hidden: true,
            ..var("HIDDEN", "", "*")
        };
        let hidden = extract(&hidden, None).unwrap_err().to_string();
        assert!(hidden.contains("variable HIDDEN is hidden"), "{hidden}");
    }

    #[test]
    fn a_map_is_a_flat_object_of_strings() {
        let map = as_map("DB", br#"{"user":"alice","password":"pw"}"#).unwrap();
        assert_eq!(map["user"], b"alice");
        assert_eq!(map["password"], b"pw");
        for bad in [
            &br#"{"port":5432}"#[..],
            br#"{"nested":{"a":"b"}}"#,
            br#"["a"]"#,
            b"not json s3cr3t",
        ] {
            let err = as_map("DB", bad).unwrap_err().to_string();
            assert!(
                err.contains("variable DB is not a JSON object of strings"),
                "{err}"
            );
            assert!(!err.contains("5432") && !err.contains("s3cr3t"), "{err}");
        }
        let deep = format!("{}1{}", "[".repeat(3000), "]".repeat(3000));
        let err = as_map("DB", deep.as_bytes()).unwrap_err().to_string();
        assert!(
            err.ends_with("of strings: recursion limit exceeded at line 1 column 128"),
            "{err}"
        );
    }

    #[test]
    fn find_checks_tags_then_path_then_name() {
        let err = |f: FindRequest, env: Option<&str>| find_query(&f, env).unwrap_err().to_string();
        assert!(err(find(Some("."), &[("team", "a")], None), None).contains(
            "find.tags.team: the GitLab provider supports only the tag environment_scope"
        ));
        assert!(
            err(
                find(Some("."), &[("environment_scope", "staging")], None),
                Some("production")
            )
            .contains("find.tags.environment_scope: \"staging\" conflicts with the store's environment \"production\"")
        );
        assert!(err(find(Some("."), &[], Some("a/b")), None).contains("find.path"));
        assert!(err(find(None, &[], None), None).contains("find.name.regexp is required"));
        assert!(err(find(Some("("), &[], None), None).contains("find.name.regexp:"));

        let q = find_query(&find(Some("^DB_"), &[], None), Some("production")).unwrap();
        assert_eq!(q.environment, "production");
        let q = find_query(
            &find(Some("."), &[("environment_scope", "staging")], None),
            Some("*"),
        )
        .unwrap();
        assert_eq!(q.environment, "staging");
        let q = find_query(
            &find(Some("."), &[("environment_scope", "production")], None),
            Some("production"),
        )
        .unwrap();
        assert_eq!(q.environment, "production");
        // As in ESO, a wildcard tag widens the store's environment to every scope.
        let q = find_query(
            &find(Some("."), &[("environment_scope", "*")], None),
            Some("production"),
        )
        .unwrap();
        assert_eq!(q.environment, "*");
    }

    #[test]
    fn find_filters_by_scope_and_name() {
        let q = find_query(&find(Some("^DB_"), &[], None), Some("production")).unwrap();
        let mut merge = Merge::default();
        merge.add(
            &q,
            &Place::Project("p".into()),
            &[
                var("DB_USER", "u", "*"),
                var("DB_PASSWORD", "prod", "production"),
                var("DB_HOST", "staging-host", "staging"),
                var("OTHER", "o", "*"),
                Variable {
                    value: None,
                    hidden: true,
                    ..var("DB_HIDDEN", "", "*")
                },
            ],
        );
        let got = merge.finish();
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            vec!["DB_PASSWORD", "DB_USER"]
        );

        // Without an environment every scope matches.
        let q = find_query(&find(Some("^DB_HOST$"), &[], None), None).unwrap();
        let mut merge = Merge::default();
        merge.add(
            &q,
            &Place::Project("p".into()),
            &[var("DB_HOST", "staging-host", "staging")],
        );
        assert_eq!(merge.finish()["DB_HOST"], b"staging-host");
    }

    #[test]
    fn find_prefers_the_project_then_specific_scopes_then_later_groups() {
        let q = find_query(&find(Some("."), &[], None), Some("production")).unwrap();
        let mut merge = Merge::default();
        merge.add(
            &q,
            &Place::Group("root".into()),
            &[
                var("A", "root-a", "*"),
                var("B", "root-b-prod", "production"),
                var("C", "root-c", "*"),
                var("D", "root-d-prod", "production"),
                var("E", "root-e", "*"),
            ],
        );
        merge.add(
            &q,
            &Place::Group("team".into()),
            &[
                // A later group's wildcard beats an earlier group's wildcard...
                var("A", "team-a", "*"),
                // ...but not an earlier group's environment-specific value.
                var("B", "team-b", "*"),
                // A later group's specific value beats an earlier wildcard or specific one.
                var("C", "team-c-prod", "production"),
                var("D", "team-d-prod", "production"),
            ],
        );
        merge.add(
            &q,
            &Place::Project("p".into()),
            &[
                // The project's specific value wins over everything...
                var("D", "project-d-prod", "production"),
                // ...even when listed before the project's own wildcard.
                var("D", "project-d", "*"),
                // The project's wildcard beats the groups' specific values.
                var("C", "project-c", "*"),
            ],
        );
        let got = merge.finish();
        let s = |k: &str| String::from_utf8(got[k].clone()).unwrap();
        assert_eq!(s("A"), "team-a");
        assert_eq!(s("B"), "root-b-prod");
        assert_eq!(s("C"), "project-c");
        assert_eq!(s("D"), "project-d-prod");
        assert_eq!(s("E"), "root-e");
    }

    #[test]
    fn a_variable_debug_leaves_the_value_out() {
        let shown = format!("{:?}", var("TOKEN", "s3cr3t", "*"));
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("TOKEN"), "{shown}");
    }

    #[test]
    fn variables_parse_with_gitlab_defaults() {
        let v: Variable =
            serde_json::from_str(r#"{"key":"K","value":null,"hidden":true}"#).unwrap();
        assert_eq!(v.environment_scope, "*");
        assert_eq!(v.variable_type, "env_var");
        assert!(v.value.is_none() && v.hidden);
        let groups: Vec<ProjectGroup> = serde_json::from_str(
            r#"[{"id":7,"name":"g","web_url":"u","avatar_url":null,"full_name":"G","full_path":"org/g"}]"#,
        )
        .unwrap();
        assert_eq!(groups[0].id, 7);
    }
}
