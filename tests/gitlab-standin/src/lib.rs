//! A GitLab stand-in for tests: the CI/CD variables API (project and group), the project's
//! ancestor groups, the project and the current user, served over plain HTTP on a free
//! 127.0.0.1 port by a thread with its own tokio runtime, so sync and async tests can use it.
//!
//! It behaves like GitLab as `gitlab-ci-variables-semantics.md` describes it, and proves its
//! shapes: every response to an operation of GitLab's OpenAPI document
//! (`openapi/gitlab-ci-variables.yaml`) is checked against it (see [`openapi`] for where GitLab
//! and its document differ). Violations are recorded ([`GitlabStandin::violations`]); in strict
//! mode the offending response becomes a 500 and dropping the stand-in panics.
//!
//! ```no_run
//! use external_secrets_gitlab_standin::{GitlabStandin, Role, Variable};
//! # fn main() -> anyhow::Result<()> {
//! let gitlab = GitlabStandin::start()?;
//! gitlab.add_group("acme")?;
//! gitlab.add_project("acme/app")?;
//! gitlab.add_user("alice", "glpat-alice")?;
//! gitlab.grant("alice", "acme/app", Role::Maintainer)?;
//! gitlab.add_project_variable("acme/app", Variable::new("DB_PASSWORD", "s3cr3t-value").masked())?;
//! // ... point a client at gitlab.url() ...
//! gitlab.assert_no_violations();
//! # Ok(()) }
//! ```

mod api;
mod model;
pub mod openapi;
mod params;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};

pub use api::UNMATCHED;
pub use model::{Role, Variable, VariableType};
pub use openapi::Violation;

use model::{Container, State, StoredVariable};

/// What the server thread and the handle share; it outlives restarts.
pub(crate) struct Shared {
    state: Mutex<State>,
    traffic: Mutex<Traffic>,
    openapi: openapi::OpenApi,
    strict: AtomicBool,
    base_url: String,
}

/// Bookkeeping about requests rather than GitLab data.
#[derive(Default)]
struct Traffic {
    requests: BTreeMap<(String, String), u64>,
    rate_limited: u64,
    violations: Vec<Violation>,
}

impl Shared {
    // A handler that panicked (it must not) would poison the lock; the data stays usable.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn traffic(&self) -> MutexGuard<'_, Traffic> {
        self.traffic.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The running server's thread and the way to stop it.
struct Server {
    shutdown: tokio::sync::oneshot::Sender<()>,
    thread: JoinHandle<()>,
}

/// A GitLab stand-in; dropping it stops the server.
pub struct GitlabStandin {
    shared: Arc<Shared>,
    port: u16,
    server: Mutex<Option<Server>>,
}

impl GitlabStandin {
    /// Serves on a free 127.0.0.1 port. Works inside or outside a tokio runtime.
    pub fn start() -> Result<Self> {
        let listener =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding a free 127.0.0.1 port")?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            traffic: Mutex::default(),
            openapi: openapi::OpenApi::load()?,
            strict: AtomicBool::new(false),
            base_url: format!("http://127.0.0.1:{port}"),
        });
        let standin = Self {
            shared,
            port,
            server: Mutex::new(None),
        };
        standin.serve(listener)?;
        Ok(standin)
    }

    /// Like [`start`](Self::start), in strict mode.
    pub fn start_strict() -> Result<Self> {
        let standin = Self::start()?;
        standin.set_strict(true);
        Ok(standin)
    }

    /// `http://127.0.0.1:PORT`, the base URL a GitLab client takes (the API is under
    /// `/api/v4`).
    pub fn url(&self) -> String {
        self.shared.base_url.clone()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    fn serve(&self, listener: TcpListener) -> Result<()> {
        listener.set_nonblocking(true)?;
        let (shutdown, stopped) = tokio::sync::oneshot::channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let app = api::router(self.shared.clone());
        let thread = std::thread::Builder::new()
            .name(format!("gitlab-standin-{}", self.port))
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready_tx.send(Err(anyhow::Error::from(e)));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => listener,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.into()));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    // Stopping is abrupt, like a crash: leaving this future and then dropping
                    // the runtime closes the listener and every open connection, so clients
                    // see refused or reset connections rather than a drained server.
                    tokio::select! {
                        result = axum::serve(listener, app) => {
                            if let Err(e) = result {
                                eprintln!("gitlab-standin: server error: {e}");
                            }
                        }
                        _ = stopped => {}
                    }
                });
            })
            .context("spawning the stand-in's thread")?;
        ready_rx
            .recv()
            .context("the stand-in's thread ended before serving")??;
        *self.server.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(Server { shutdown, thread });
        Ok(())
    }

    /// Stops serving (connections are refused) and keeps all data; see [`restart`].
    ///
    /// [`restart`]: Self::restart
    pub fn stop(&self) {
        let server = self
            .server
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(server) = server {
            let _ = server.shutdown.send(());
            let _ = server.thread.join();
        }
    }

    /// Serves again on the same port with the same data (after [`stop`](Self::stop)).
    pub fn restart(&self) -> Result<()> {
        self.stop();
        // The port was ours a moment ago; a client's lingering connection can hold it briefly.
        let deadline = Instant::now() + Duration::from_secs(10);
        let listener = loop {
            match TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))) {
                Ok(listener) => break listener,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("binding 127.0.0.1:{} again", self.port));
                }
            }
        };
        self.serve(listener)
    }

    /// Whether the server is serving (false between [`stop`](Self::stop) and
    /// [`restart`](Self::restart)).
    pub fn is_running(&self) -> bool {
        self.server
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    // ---- seeding ----------------------------------------------------------------------------

    /// A user with an access token (a user may have several tokens).
    pub fn add_user(&self, username: &str, token: &str) -> Result<u64> {
        self.shared.state().add_user(username, token)
    }

    /// A group by full path (`acme`, `acme/platform`); its parent must exist. Returns its id.
    pub fn add_group(&self, full_path: &str) -> Result<u64> {
        self.shared.state().add_group(full_path)
    }

    /// A project by full path (`acme/platform/app`) in an existing group. Returns its id.
    pub fn add_project(&self, full_path: &str) -> Result<u64> {
        self.shared.state().add_project(full_path)
    }

    /// Makes the user a member of a project or group (by full path) with this role. Group
    /// membership is inherited by subgroups and projects, as in GitLab.
    pub fn grant(&self, username: &str, full_path: &str, role: Role) -> Result<()> {
        let mut state = self.shared.state();
        let user = state.user_by_name(username)?;
        let container = state.container(full_path)?;
        state.members.insert((user, container), role);
        Ok(())
    }

    /// Shares a project with a group (listed by `GET /projects/:id/groups?with_shared=true`).
    pub fn share_project_with_group(&self, project: &str, group: &str) -> Result<()> {
        let mut state = self.shared.state();
        let group = state
            .group_by_path(group)
            .with_context(|| format!("no group {group}"))?;
        let project = state
            .project_by_path(project)
            .with_context(|| format!("no project {project}"))?;
        if let Some(project) = state.projects.get_mut(&project) {
            project.shared_with.push(group);
        }
        Ok(())
    }

    pub fn project_id(&self, full_path: &str) -> Result<u64> {
        self.shared
            .state()
            .project_by_path(full_path)
            .with_context(|| format!("no project {full_path}"))
    }

    pub fn group_id(&self, full_path: &str) -> Result<u64> {
        self.shared
            .state()
            .group_by_path(full_path)
            .with_context(|| format!("no group {full_path}"))
    }

    /// Adds a project variable as is, bypassing the API (but not GitLab's rules: a variable
    /// the API would refuse is refused here too).
    pub fn add_project_variable(&self, project: &str, variable: Variable) -> Result<()> {
        let container = Container::Project(self.project_id(project)?);
        self.add_variable(container, variable)
    }

    pub fn add_group_variable(&self, group: &str, variable: Variable) -> Result<()> {
        let container = Container::Group(self.group_id(group)?);
        self.add_variable(container, variable)
    }

    fn add_variable(&self, container: Container, variable: Variable) -> Result<()> {
        let mut state = self.shared.state();
        let Some(variables) = state.variables_mut(container) else {
            bail!("no such container");
        };
        let others: Vec<&Variable> = variables.iter().map(|v| &v.variable).collect();
        if let Err(errors) = api::validate(&variable, &others) {
            bail!(
                "GitLab would refuse variable {}: {}",
                variable.key,
                serde_json::Value::Object(errors)
            );
        }
        variables.push(StoredVariable {
            variable,
            updated_at: SystemTime::now(),
        });
        Ok(())
    }

    /// The project's variables as stored (hidden values included), in creation order.
    pub fn project_variables(&self, project: &str) -> Result<Vec<Variable>> {
        let container = Container::Project(self.project_id(project)?);
        Ok(self.variables(container))
    }

    pub fn group_variables(&self, group: &str) -> Result<Vec<Variable>> {
        let container = Container::Group(self.group_id(group)?);
        Ok(self.variables(container))
    }

    fn variables(&self, container: Container) -> Vec<Variable> {
        self.shared
            .state()
            .variables(container)
            .map(|v| v.iter().map(|v| v.variable.clone()).collect())
            .unwrap_or_default()
    }

    // ---- traffic ----------------------------------------------------------------------------

    /// Answers the next `n` requests with 429, `Retry-After: 1` and GitLab's throttle body.
    pub fn set_rate_limit(&self, n: u64) {
        self.shared.traffic().rate_limited = n;
    }

    /// Requests served so far, per `(method, route template)`, e.g.
    /// `("GET", "/api/v4/projects/{id}/variables/{key}")`; unrouted ones under [`UNMATCHED`].
    /// Rate-limited and failed requests count too: they are HTTP requests all the same.
    pub fn requests(&self) -> BTreeMap<(String, String), u64> {
        self.shared.traffic().requests.clone()
    }

    /// Requests for one route template and method.
    pub fn request_count(&self, method: &str, template: &str) -> u64 {
        self.shared
            .traffic()
            .requests
            .get(&(method.to_owned(), template.to_owned()))
            .copied()
            .unwrap_or_default()
    }

    /// All requests counted so far.
    pub fn total_requests(&self) -> u64 {
        self.shared.traffic().requests.values().sum()
    }

    pub fn reset_requests(&self) {
        self.shared.traffic().requests.clear();
    }

    // ---- OpenAPI ----------------------------------------------------------------------------

    /// Responses that did not match GitLab's OpenAPI document, oldest first.
    pub fn violations(&self) -> Vec<Violation> {
        self.shared.traffic().violations.clone()
    }

    /// Panics (it is for tests) listing every violation, if there is any.
    #[track_caller]
    pub fn assert_no_violations(&self) {
        let violations = self.violations();
        assert!(
            violations.is_empty(),
            "the GitLab stand-in sent responses its OpenAPI document does not allow:\n{}",
            violations
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    /// Strict mode: a violating response is replaced by a 500 naming the violation (so the
    /// client under test fails at that request), and dropping the stand-in panics if any
    /// violation was recorded.
    pub fn set_strict(&self, strict: bool) {
        self.shared.strict.store(strict, Ordering::SeqCst);
    }
}

impl Drop for GitlabStandin {
    fn drop(&mut self) {
        self.stop();
        if self.shared.strict.load(Ordering::SeqCst) && !std::thread::panicking() {
            self.assert_no_violations();
        }
    }
}
