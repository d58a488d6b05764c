//! The provider's operations as sequences of GitLab calls, over a [`Backend`] trait: the HTTP
//! client in production, an in-memory table in tests, so the order of calls (project before
//! groups, the environment before `*`, ancestors listed only when needed, a read before every
//! write) is tested without a server.

use std::collections::BTreeMap;

use async_trait::async_trait;
use provider::{Error, Result};

use crate::push::{self, MetadataSpec, Plan, Removal};
use crate::variables::{self, FindQuery, Merge, Place, Variable};

/// The GitLab calls the operations need; errors are already the contract's.
#[async_trait]
pub(crate) trait Backend: Send + Sync {
    /// One variable by exact key and, when given, exact scope; `None` when there is none.
    async fn get(&self, place: &Place, key: &str, scope: Option<&str>) -> Result<Option<Variable>>;
    /// Every variable of a project or group.
    async fn list(&self, place: &Place) -> Result<Vec<Variable>>;
    /// The project's ancestor groups' IDs, root first.
    async fn ancestors(&self, project: &str) -> Result<Vec<String>>;
    async fn create(&self, place: &Place, body: &push::VariableWrite) -> Result<()>;
    async fn update(&self, place: &Place, body: &push::VariableWrite) -> Result<()>;
    async fn delete(&self, place: &Place, key: &str, scope: &str) -> Result<()>;
}

/// What the operations need of the spec.
#[derive(Clone, Debug, Default)]
pub(crate) struct Scope {
    pub project: Option<String>,
    pub groups: Vec<String>,
    pub inherit_from_groups: bool,
    /// Empty when unset.
    pub environment: String,
}

impl Scope {
    /// `groupIDs`, or the project's ancestors, root first.
    async fn groups(&self, backend: &dyn Backend) -> Result<Vec<String>> {
        match (&self.project, self.inherit_from_groups) {
            (Some(project), true) => backend.ancestors(project).await,
            _ => Ok(self.groups.clone()),
        }
    }

    /// Where pushed variables go: the project, else the first group.
    pub(crate) fn push_target(&self) -> Result<Place> {
        match (&self.project, self.groups.first()) {
            (Some(p), _) => Ok(Place::Project(p.clone())),
            (None, Some(g)) => Ok(Place::Group(g.clone())),
            (None, None) => Err(Error::InvalidSpec(
                "projectID or groupIDs is required to push".into(),
            )),
        }
    }

    /// The environment scope pushed variables get: the store's, else `*`.
    pub(crate) fn push_scope(&self) -> &str {
        if self.environment.is_empty() {
            variables::WILDCARD
        } else {
            &self.environment
        }
    }
}

/// One variable in `place`: with the store's environment, then `*` (ESO's fallback).
async fn find_in(
    backend: &dyn Backend,
    scope: &Scope,
    place: &Place,
    key: &str,
) -> Result<Option<Variable>> {
    for filter in variables::scope_filters(Some(&scope.environment)) {
        if let Some(found) = backend.get(place, key, filter.as_deref()).await? {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

/// `get_secret`'s variable: the project first, then the groups from last to first; the groups
/// (ancestors, with `inheritFromGroups`) are resolved only when the project lacks the key.
pub(crate) async fn lookup(
    backend: &dyn Backend,
    scope: &Scope,
    remote_key: &str,
) -> Result<Variable> {
    let key = variables::variable_key(remote_key);
    if let Some(project) = &scope.project
        && let Some(found) = find_in(backend, scope, &Place::Project(project.clone()), &key).await?
    {
        return Ok(found);
    }
    let groups = scope.groups(backend).await?;
    for place in variables::lookup_order(None, &groups) {
        if let Some(found) = find_in(backend, scope, &place, &key).await? {
            return Ok(found);
        }
    }
    Err(Error::NoSecret)
}

/// `get_all_secrets`: the groups left to right, then the project, merged by [`Merge`].
pub(crate) async fn find_all(
    backend: &dyn Backend,
    scope: &Scope,
    query: &FindQuery,
) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut merge = Merge::default();
    let places = scope
        .groups(backend)
        .await?
        .into_iter()
        .map(Place::Group)
        .chain(scope.project.clone().map(Place::Project));
    for place in places {
        let listed = backend.list(&place).await?;
        merge.add(query, &place, &listed);
    }
    Ok(merge.finish())
}

/// `validate`: the token may list the project's variables and each group's.
pub(crate) async fn validate(backend: &dyn Backend, scope: &Scope) -> Result<()> {
    if let Some(project) = &scope.project {
        backend.list(&Place::Project(project.clone())).await?;
    }
    for group in scope.groups(backend).await? {
        backend.list(&Place::Group(group)).await?;
    }
    Ok(())
}

/// `push_secret`: read the variable in the push scope, then create, update or leave it.
pub(crate) async fn push(
    backend: &dyn Backend,
    scope: &Scope,
    remote_key: &str,
    value: &[u8],
    metadata: &MetadataSpec,
) -> Result<Plan> {
    let key = variables::variable_key(remote_key);
    let (place, env) = (scope.push_target()?, scope.push_scope());
    let existing = backend.get(&place, &key, Some(env)).await?;
    let plan = push::plan(&key, env, value, metadata, existing.as_ref())?;
    match &plan {
        Plan::Unchanged => {}
        Plan::Create(body) => backend.create(&place, body).await?,
        Plan::Update(body) => backend.update(&place, body).await?,
    }
    Ok(plan)
}

/// `delete_secret`: only a variable carrying our marker is deleted.
pub(crate) async fn delete(
    backend: &dyn Backend,
    scope: &Scope,
    remote_key: &str,
) -> Result<Removal> {
    let key = variables::variable_key(remote_key);
    let (place, env) = (scope.push_target()?, scope.push_scope());
    let existing = backend.get(&place, &key, Some(env)).await?;
    let removal = push::removal(existing.as_ref());
    match removal {
        Removal::Delete => backend.delete(&place, &key, env).await?,
        Removal::NotOurs => tracing::warn!(
            %place, key, scope = env,
            "not deleting GitLab variable: it is not managed by external-secrets"
        ),
        Removal::Nothing => {}
    }
    Ok(removal)
}

/// `secret_exists`: any variable (ours or not) of the key in the push scope.
pub(crate) async fn exists(backend: &dyn Backend, scope: &Scope, remote_key: &str) -> Result<bool> {
    let key = variables::variable_key(remote_key);
    let (place, env) = (scope.push_target()?, scope.push_scope());
    Ok(backend.get(&place, &key, Some(env)).await?.is_some())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use provider::FindRequest;

    use super::*;
    use crate::push::MANAGED_BY;

    /// GitLab's variable tables in memory, with its lookup rules (exact key, exact scope when
    /// filtered, 409 when unfiltered and ambiguous), recording every call.
    #[derive(Default)]
    struct Memory {
        tables: Mutex<BTreeMap<String, Vec<Variable>>>,
        ancestors: Vec<String>,
        calls: Mutex<Vec<String>>,
    }

    fn name(place: &Place) -> String {
        match place {
            Place::Project(id) => format!("p{id}"),
            Place::Group(id) => format!("g{id}"),
        }
    }

    impl Memory {
        fn with(mut self, place: &str, variables: Vec<Variable>) -> Self {
            self.tables
                .get_mut()
                .unwrap()
                .insert(place.into(), variables);
            self
        }

        fn calls(&self) -> Vec<String> {
            std::mem::take(&mut *self.calls.lock().unwrap())
        }

        fn log(&self, call: String) {
            self.calls.lock().unwrap().push(call);
        }
    }

    #[async_trait]
    impl Backend for Memory {
        async fn get(
            &self,
            place: &Place,
            key: &str,
            scope: Option<&str>,
        ) -> Result<Option<Variable>> {
            self.log(format!(
                "get {} {key} {}",
                name(place),
                scope.unwrap_or("-")
            ));
            let tables = self.tables.lock().unwrap();
            let found: Vec<&Variable> = tables
                .get(&name(place))
                .into_iter()
                .flatten()
                .filter(|v| v.key == key && scope.is_none_or(|s| v.environment_scope == s))
                .collect();
            match found.as_slice() {
                [] => Ok(None),
                [one] => Ok(Some((*one).clone())),
                _ => Err(Error::Backend("409 multiple variables".into())),
            }
        }

        async fn list(&self, place: &Place) -> Result<Vec<Variable>> {
            self.log(format!("list {}", name(place)));
            let tables = self.tables.lock().unwrap();
            Ok(tables.get(&name(place)).cloned().unwrap_or_default())
        }

        async fn ancestors(&self, project: &str) -> Result<Vec<String>> {
            self.log(format!("groups p{project}"));
            Ok(self.ancestors.clone())
        }

        async fn create(&self, place: &Place, body: &push::VariableWrite) -> Result<()> {
            self.log(format!(
                "create {} {} {}",
                name(place),
                body.key,
                body.environment_scope
            ));
            let mut tables = self.tables.lock().unwrap();
            tables.entry(name(place)).or_default().push(Variable {
                key: body.key.clone(),
                value: Some(body.value.clone()),
                environment_scope: body.environment_scope.clone(),
                variable_type: body.variable_type.as_str().into(),
                masked: body.masked,
                protected: body.protected,
                raw: body.raw,
                hidden: false,
                description: Some(body.description.clone()),
            });
            Ok(())
        }

        async fn update(&self, place: &Place, body: &push::VariableWrite) -> Result<()> {
            self.log(format!(
                "update {} {} {}",
                name(place),
                body.key,
                body.environment_scope
            ));
            let mut tables = self.tables.lock().unwrap();
            let v = tables
                .get_mut(&name(place))
                .and_then(|t| {
                    t.iter_mut().find(|v| {
                        v.key == body.key && v.environment_scope == body.environment_scope
                    })
                })
                .expect("update of a variable that is there");
            v.value = Some(body.value.clone());
            v.masked = body.masked;
            v.description = Some(body.description.clone());
            Ok(())
        }

        async fn delete(&self, place: &Place, key: &str, scope: &str) -> Result<()> {
            self.log(format!("delete {} {key} {scope}", name(place)));
            let mut tables = self.tables.lock().unwrap();
            if let Some(t) = tables.get_mut(&name(place)) {
                t.retain(|v| !(v.key == key && v.environment_scope == scope));
            }
            Ok(())
        }
    }

    fn var(key: &str, value: &str, scope: &str) -> Variable {
        Variable {
            key: key.into(),
            value: Some(value.into()),
            environment_scope: scope.into(),
            variable_type: "env_var".into(),
            ..Variable::default()
        }
    }

    fn scope(project: Option<&str>, groups: &[&str], inherit: bool, env: &str) -> Scope {
        Scope {
            project: project.map(Into::into),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            inherit_from_groups: inherit,
            environment: env.into(),
        }
    }

    async fn value(backend: &Memory, scope: &Scope, key: &str) -> Result<String> {
        lookup(backend, scope, key)
            .await
            .map(|v| v.value.unwrap_or_default())
    }

    #[tokio::test]
    async fn the_project_environment_then_its_wildcard_then_the_groups_last_first() {
        let backend = Memory::default()
            .with(
                "p1",
                vec![
                    var("DB_USER", "project-prod", "production"),
                    var("DB_HOST", "project-any", "*"),
                ],
            )
            .with(
                "g10",
                vec![
                    var("DB_PASSWORD", "root-pw", "*"),
                    var("DB_PORT", "root-port", "*"),
                ],
            )
            .with("g20", vec![var("DB_PASSWORD", "team-pw", "*")]);
        let s = scope(Some("1"), &["10", "20"], false, "production");

        assert_eq!(
            value(&backend, &s, "DB-USER").await.unwrap(),
            "project-prod"
        );
        assert_eq!(backend.calls(), ["get p1 DB_USER production"]);

        assert_eq!(value(&backend, &s, "DB_HOST").await.unwrap(), "project-any");
        assert_eq!(
            backend.calls(),
            ["get p1 DB_HOST production", "get p1 DB_HOST *"]
        );

        assert_eq!(value(&backend, &s, "DB_PASSWORD").await.unwrap(), "team-pw");
        assert_eq!(
            backend.calls(),
            [
                "get p1 DB_PASSWORD production",
                "get p1 DB_PASSWORD *",
                "get g20 DB_PASSWORD production",
                "get g20 DB_PASSWORD *",
            ]
        );

        assert_eq!(value(&backend, &s, "DB_PORT").await.unwrap(), "root-port");
        backend.calls();

        assert!(matches!(
            lookup(&backend, &s, "NOPE").await,
            Err(Error::NoSecret)
        ));
        assert_eq!(backend.calls().len(), 6);
    }

    #[tokio::test]
    async fn without_an_environment_there_is_no_filter_and_no_fallback() {
        let backend = Memory::default().with(
            "p1",
            vec![
                var("A", "only", "staging"),
                var("B", "b1", "*"),
                var("B", "b2", "production"),
            ],
        );
        let s = scope(Some("1"), &[], false, "");
        assert_eq!(value(&backend, &s, "A").await.unwrap(), "only");
        assert_eq!(backend.calls(), ["get p1 A -"]);
        // Several scopes and no environment to choose: GitLab's 409 comes through.
        assert!(
            value(&backend, &s, "B")
                .await
                .unwrap_err()
                .to_string()
                .contains("409")
        );

        let wildcard = scope(Some("1"), &[], false, "*");
        assert!(matches!(
            lookup(&backend, &wildcard, "A").await,
            Err(Error::NoSecret)
        ));
        assert_eq!(backend.calls(), ["get p1 B -", "get p1 A *"]);
    }

    #[tokio::test]
    async fn ancestors_are_listed_only_when_the_project_lacks_the_key() {
        let backend = Memory {
            ancestors: vec!["10".into(), "20".into()],
            ..Memory::default()
        }
        .with("p1", vec![var("HERE", "p", "*")])
        .with("g10", vec![var("SHARED", "root", "*")])
        .with("g20", vec![var("SHARED", "nearest", "*")]);
        let s = scope(Some("1"), &[], true, "");
        assert_eq!(value(&backend, &s, "HERE").await.unwrap(), "p");
        assert_eq!(backend.calls(), ["get p1 HERE -"]);
        assert_eq!(value(&backend, &s, "SHARED").await.unwrap(), "nearest");
        assert_eq!(
            backend.calls(),
            ["get p1 SHARED -", "groups p1", "get g20 SHARED -"]
        );
    }

    #[tokio::test]
    async fn a_store_of_groups_only_never_asks_for_a_project() {
        let backend = Memory::default().with("g5", vec![var("K", "v", "*")]);
        let s = scope(None, &["5"], false, "");
        assert_eq!(value(&backend, &s, "K").await.unwrap(), "v");
        assert_eq!(backend.calls(), ["get g5 K -"]);
    }

    #[tokio::test]
    async fn find_lists_groups_left_to_right_then_the_project() {
        let backend = Memory {
            ancestors: vec!["10".into(), "20".into()],
            ..Memory::default()
        }
        .with("g10", vec![var("A", "root", "*"), var("B", "root", "*")])
        .with("g20", vec![var("A", "team", "*")])
        .with(
            "p1",
            vec![
                var("B", "project-prod", "production"),
                var("B", "project", "*"),
            ],
        );
        let s = scope(Some("1"), &[], true, "production");
        let query = variables::find_query(
            &FindRequest {
                name_regexp: Some(".".into()),
                ..FindRequest::default()
            },
            Some("production"),
        )
        .unwrap();
        let got = find_all(&backend, &s, &query).await.unwrap();
        assert_eq!(got["A"], b"team");
        assert_eq!(got["B"], b"project-prod");
        assert_eq!(
            backend.calls(),
            ["groups p1", "list g10", "list g20", "list p1"]
        );

        validate(&backend, &s).await.unwrap();
        assert_eq!(
            backend.calls(),
            ["list p1", "groups p1", "list g10", "list g20"]
        );
    }

    #[tokio::test]
    async fn push_creates_then_leaves_alone_then_updates_and_refuses_what_is_not_ours() {
        let backend = Memory::default().with(
            "p1",
            vec![Variable {
                description: Some("set by hand".into()),
                ..var("THEIRS", "x", "production")
            }],
        );
        let s = scope(Some("1"), &["9"], false, "production");
        let meta = MetadataSpec::default();

        let plan = push(&backend, &s, "DB-PASSWORD", b"hunter22", &meta)
            .await
            .unwrap();
        assert!(matches!(plan, Plan::Create(_)));
        assert_eq!(
            backend.calls(),
            [
                "get p1 DB_PASSWORD production",
                "create p1 DB_PASSWORD production"
            ]
        );

        let plan = push(&backend, &s, "DB-PASSWORD", b"hunter22", &meta)
            .await
            .unwrap();
        assert_eq!(plan, Plan::Unchanged);
        assert_eq!(backend.calls(), ["get p1 DB_PASSWORD production"]);

        let plan = push(&backend, &s, "DB-PASSWORD", b"rotated!", &meta)
            .await
            .unwrap();
        assert!(matches!(plan, Plan::Update(_)));
        assert_eq!(
            backend.calls(),
            [
                "get p1 DB_PASSWORD production",
                "update p1 DB_PASSWORD production"
            ]
        );
        assert_eq!(
            value(&backend, &s, "DB_PASSWORD").await.unwrap(),
            "rotated!"
        );
        backend.calls();

        let err = push(&backend, &s, "THEIRS", b"y", &meta)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("variable THEIRS"), "{err}");
        assert_eq!(backend.calls(), ["get p1 THEIRS production"]);

        assert!(exists(&backend, &s, "THEIRS").await.unwrap());
        assert!(!exists(&backend, &s, "MISSING").await.unwrap());
        backend.calls();

        assert_eq!(
            delete(&backend, &s, "THEIRS").await.unwrap(),
            Removal::NotOurs
        );
        assert_eq!(
            delete(&backend, &s, "MISSING").await.unwrap(),
            Removal::Nothing
        );
        assert_eq!(
            delete(&backend, &s, "DB-PASSWORD").await.unwrap(),
            Removal::Delete
        );
        assert_eq!(
            backend.calls(),
            [
                "get p1 THEIRS production",
                "get p1 MISSING production",
                "get p1 DB_PASSWORD production",
                "delete p1 DB_PASSWORD production",
            ]
        );
        let left = backend.tables.lock().unwrap()["p1"].clone();
        assert_eq!(left.len(), 1);
        assert!(left[0].description.as_deref() != Some(MANAGED_BY));
    }

    #[tokio::test]
    async fn pushes_without_a_project_go_to_the_first_group_in_the_wildcard_scope() {
        let backend = Memory::default();
        let s = scope(None, &["7", "8"], false, "");
        push(&backend, &s, "K", b"v", &MetadataSpec::default())
            .await
            .unwrap();
        assert_eq!(backend.calls(), ["get g7 K *", "create g7 K *"]);
    }
}
