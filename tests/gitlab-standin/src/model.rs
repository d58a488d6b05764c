//! What the stand-in knows: users and their tokens, groups, projects, memberships and CI/CD
//! variables, with GitLab's rules for who may see and change what.

use std::collections::{BTreeMap, HashMap};
use std::time::SystemTime;

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};

/// A membership role (GitLab's access levels; the number is GitLab's `access_level`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    Guest = 10,
    Reporter = 20,
    Developer = 30,
    Maintainer = 40,
    Owner = 50,
}

/// `variable_type` of a CI/CD variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum VariableType {
    #[default]
    EnvVar,
    File,
}

impl VariableType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EnvVar => "env_var",
            Self::File => "file",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "env_var" => Some(Self::EnvVar),
            "file" => Some(Self::File),
            _ => None,
        }
    }
}

/// A CI/CD variable with every field GitLab stores. [`Variable::new`] gives GitLab's create
/// defaults (`env_var`, scope `*`, every flag false, no description).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Variable {
    pub key: String,
    pub value: String,
    pub variable_type: VariableType,
    pub protected: bool,
    pub masked: bool,
    /// Set only at create time (`masked_and_hidden=true`); responses then carry `value: null`.
    pub hidden: bool,
    pub raw: bool,
    pub environment_scope: String,
    pub description: Option<String>,
}

impl Variable {
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
            variable_type: VariableType::EnvVar,
            protected: false,
            masked: false,
            hidden: false,
            raw: false,
            environment_scope: "*".to_owned(),
            description: None,
        }
    }

    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.environment_scope = scope.into();
        self
    }

    pub fn masked(mut self) -> Self {
        self.masked = true;
        self
    }

    /// Masked and hidden, as `masked_and_hidden=true` creates it.
    pub fn hidden(mut self) -> Self {
        self.masked = true;
        self.hidden = true;
        self
    }

    pub fn protected(mut self) -> Self {
        self.protected = true;
        self
    }

    pub fn raw(mut self) -> Self {
        self.raw = true;
        self
    }

    pub fn file(mut self) -> Self {
        self.variable_type = VariableType::File;
        self
    }

    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// The `APIEntitiesCiVariable` GitLab answers with: hidden values are never shown.
    pub fn to_json(&self) -> Value {
        json!({
            "variable_type": self.variable_type.as_str(),
            "key": self.key,
            "value": if self.hidden { Value::Null } else { Value::String(self.value.clone()) },
            "hidden": self.hidden,
            "protected": self.protected,
            "masked": self.masked,
            "raw": self.raw,
            "environment_scope": self.environment_scope,
            "description": self.description,
        })
    }
}

/// A variable as stored, with what `If-Unmodified-Since` compares against.
#[derive(Clone, Debug)]
pub(crate) struct StoredVariable {
    pub variable: Variable,
    pub updated_at: SystemTime,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Container {
    Project(u64),
    Group(u64),
}

#[derive(Debug)]
pub(crate) struct User {
    pub id: u64,
    pub username: String,
}

#[derive(Debug)]
pub(crate) struct Group {
    pub id: u64,
    pub name: String,
    pub full_path: String,
    pub parent: Option<u64>,
    pub variables: Vec<StoredVariable>,
}

#[derive(Debug)]
pub(crate) struct Project {
    pub id: u64,
    pub name: String,
    pub full_path: String,
    pub namespace: u64,
    /// Groups the project is shared with (`GET /projects/:id/groups?with_shared=true`).
    pub shared_with: Vec<u64>,
    pub variables: Vec<StoredVariable>,
}

/// Everything behind the stand-in's mutex.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub users: BTreeMap<u64, User>,
    /// Token value → user id. Token values are never logged.
    pub tokens: HashMap<String, u64>,
    pub groups: BTreeMap<u64, Group>,
    pub projects: BTreeMap<u64, Project>,
    pub members: HashMap<(u64, Container), Role>,
    /// GitLab numbers namespaces and projects from separate sequences; one counter per kind
    /// keeps ids small and distinct enough for tests to tell them apart.
    next_user: u64,
    next_group: u64,
    next_project: u64,
}

impl State {
    pub fn add_user(&mut self, username: &str, token: &str) -> Result<u64> {
        ensure!(
            !self.tokens.contains_key(token),
            "that token is already registered"
        );
        let id = match self.users.values().find(|u| u.username == username) {
            Some(user) => user.id,
            None => {
                self.next_user += 1;
                let id = self.next_user;
                self.users.insert(
                    id,
                    User {
                        id,
                        username: username.to_owned(),
                    },
                );
                id
            }
        };
        self.tokens.insert(token.to_owned(), id);
        Ok(id)
    }

    pub fn add_group(&mut self, full_path: &str) -> Result<u64> {
        check_path(full_path)?;
        ensure!(
            self.resolve_path(full_path).is_none(),
            "{full_path} already exists"
        );
        let (parent, name) = match full_path.rsplit_once('/') {
            Some((parent, name)) => {
                let parent = self.group_by_path(parent).with_context(|| {
                    format!("parent group {parent} of {full_path} does not exist")
                })?;
                (Some(parent), name)
            }
            None => (None, full_path),
        };
        self.next_group += 1;
        let id = self.next_group;
        self.groups.insert(
            id,
            Group {
                id,
                name: name.to_owned(),
                full_path: full_path.to_owned(),
                parent,
                variables: Vec::new(),
            },
        );
        Ok(id)
    }

    pub fn add_project(&mut self, full_path: &str) -> Result<u64> {
        check_path(full_path)?;
        ensure!(
            self.resolve_path(full_path).is_none(),
            "{full_path} already exists"
        );
        let Some((namespace, name)) = full_path.rsplit_once('/') else {
            bail!("project {full_path} needs a group: seed projects as GROUP/PROJECT");
        };
        let namespace = self
            .group_by_path(namespace)
            .with_context(|| format!("group {namespace} of {full_path} does not exist"))?;
        self.next_project += 1;
        let id = self.next_project;
        self.projects.insert(
            id,
            Project {
                id,
                name: name.to_owned(),
                full_path: full_path.to_owned(),
                namespace,
                shared_with: Vec::new(),
                variables: Vec::new(),
            },
        );
        Ok(id)
    }

    pub fn user_by_name(&self, username: &str) -> Result<u64> {
        self.users
            .values()
            .find(|u| u.username == username)
            .map(|u| u.id)
            .with_context(|| format!("no user {username}; add it with add_user"))
    }

    /// GitLab resolves full paths case-insensitively.
    pub fn group_by_path(&self, path: &str) -> Option<u64> {
        self.groups
            .values()
            .find(|g| g.full_path.eq_ignore_ascii_case(path))
            .map(|g| g.id)
    }

    pub fn project_by_path(&self, path: &str) -> Option<u64> {
        self.projects
            .values()
            .find(|p| p.full_path.eq_ignore_ascii_case(path))
            .map(|p| p.id)
    }

    /// A project or group by full path (they share one namespace of paths in GitLab).
    pub fn resolve_path(&self, path: &str) -> Option<Container> {
        self.project_by_path(path)
            .map(Container::Project)
            .or_else(|| self.group_by_path(path).map(Container::Group))
    }

    pub fn container(&self, path: &str) -> Result<Container> {
        self.resolve_path(path)
            .with_context(|| format!("no project or group {path}"))
    }

    /// `:id` as the API takes it: all digits is an id, anything else a full path.
    pub fn find_project(&self, id: &str) -> Option<u64> {
        if is_numeric_id(id) {
            let id = id.parse().ok()?;
            self.projects.contains_key(&id).then_some(id)
        } else {
            self.project_by_path(id)
        }
    }

    pub fn find_group(&self, id: &str) -> Option<u64> {
        if is_numeric_id(id) {
            let id = id.parse().ok()?;
            self.groups.contains_key(&id).then_some(id)
        } else {
            self.group_by_path(id)
        }
    }

    /// The group and its ancestors, nearest first.
    pub fn group_chain(&self, group: u64) -> Vec<u64> {
        let mut chain = Vec::new();
        let mut next = Some(group);
        while let Some(id) = next {
            chain.push(id);
            next = self.groups.get(&id).and_then(|g| g.parent);
        }
        chain
    }

    /// The effective role: the highest of direct and inherited (ancestor group) memberships.
    pub fn role(&self, user: u64, container: Container) -> Option<Role> {
        let groups = match container {
            Container::Project(id) => self
                .projects
                .get(&id)
                .map(|p| self.group_chain(p.namespace))
                .unwrap_or_default(),
            Container::Group(id) => self.group_chain(id),
        };
        let direct = match container {
            Container::Project(_) => self.members.get(&(user, container)).copied(),
            Container::Group(_) => None,
        };
        groups
            .into_iter()
            .filter_map(|g| self.members.get(&(user, Container::Group(g))).copied())
            .chain(direct)
            .max()
    }

    /// Whether the user can see the (private) project or group at all; otherwise GitLab
    /// answers 404, so that private names do not leak.
    pub fn can_read(&self, user: u64, container: Container) -> bool {
        if self.role(user, container).is_some() {
            return true;
        }
        // A member of something inside a private group can see that group.
        let Container::Group(group) = container else {
            return false;
        };
        self.members.keys().any(|(member, inside)| {
            *member == user
                && match *inside {
                    Container::Group(g) => self.group_chain(g).contains(&group),
                    Container::Project(p) => self
                        .projects
                        .get(&p)
                        .is_some_and(|p| self.group_chain(p.namespace).contains(&group)),
                }
        })
    }

    pub fn variables(&self, container: Container) -> Option<&Vec<StoredVariable>> {
        match container {
            Container::Project(id) => self.projects.get(&id).map(|p| &p.variables),
            Container::Group(id) => self.groups.get(&id).map(|g| &g.variables),
        }
    }

    pub fn variables_mut(&mut self, container: Container) -> Option<&mut Vec<StoredVariable>> {
        match container {
            Container::Project(id) => self.projects.get_mut(&id).map(|p| &mut p.variables),
            Container::Group(id) => self.groups.get_mut(&id).map(|g| &mut g.variables),
        }
    }
}

pub(crate) fn is_numeric_id(id: &str) -> bool {
    !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())
}

fn check_path(full_path: &str) -> Result<()> {
    ensure!(
        !full_path.is_empty()
            && full_path
                .split('/')
                .all(|s| !s.is_empty() && !is_numeric_id(s)),
        "{full_path:?} is not a usable full path (non-empty segments, not all digits)"
    );
    Ok(())
}
