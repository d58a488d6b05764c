//! RBAC against the API server's audit log: which requests of one user were refused, and which
//! permissions a set of rules grants that no request used.

use std::collections::BTreeSet;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::rbac::v1::PolicyRule;
use libtest_mimic::Trial;
use serde_json::Value;

/// One resource request, as the audit log records it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Request {
    pub group: String,
    /// `secrets`, or `serviceaccounts/token` for a subresource.
    pub resource: String,
    pub verb: String,
    pub name: Option<String>,
    pub code: Option<u16>,
}

/// `verb group/resource [name]`, the core group written `core`.
fn describe(
    f: &mut std::fmt::Formatter<'_>,
    verb: &str,
    group: &str,
    resource: &str,
    name: Option<&String>,
) -> std::fmt::Result {
    let group = if group.is_empty() { "core" } else { group };
    write!(f, "{verb} {group}/{resource}")?;
    match name {
        Some(name) => write!(f, " {name}"),
        None => Ok(()),
    }
}

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        describe(
            f,
            &self.verb,
            &self.group,
            &self.resource,
            self.name.as_ref(),
        )
    }
}

/// The resource requests `username` made, from a JSON-lines audit log.
pub fn requests(log: &str, username: &str) -> Result<Vec<Request>> {
    let mut out = Vec::new();
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let event: Value = serde_json::from_str(line).context("an audit log line")?;
        if event["user"]["username"] != username {
            continue;
        }
        let Some(object) = event.get("objectRef") else {
            continue; // discovery and other non-resource URLs
        };
        let text = |v: &Value| v.as_str().map(str::to_owned);
        let mut resource = text(&object["resource"]).unwrap_or_default();
        if let Some(sub) = text(&object["subresource"]) {
            resource = format!("{resource}/{sub}");
        }
        out.push(Request {
            group: text(&object["apiGroup"]).unwrap_or_default(),
            resource,
            verb: text(&event["verb"]).unwrap_or_default(),
            name: text(&object["name"]),
            code: event["responseStatus"]["code"]
                .as_u64()
                .and_then(|c| u16::try_from(c).ok()),
        });
    }
    Ok(out)
}

/// One permission a rule grants: a verb on a resource of a group, on one name if the rule
/// lists names.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Permission {
    pub group: String,
    pub resource: String,
    pub verb: String,
    pub name: Option<String>,
}

impl std::fmt::Display for Permission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        describe(
            f,
            &self.verb,
            &self.group,
            &self.resource,
            self.name.as_ref(),
        )
    }
}

pub fn permissions(rules: &[PolicyRule]) -> BTreeSet<Permission> {
    let mut out = BTreeSet::new();
    for rule in rules {
        let names: Vec<Option<String>> = match &rule.resource_names {
            Some(names) if !names.is_empty() => names.iter().cloned().map(Some).collect(),
            _ => vec![None],
        };
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    for name in &names {
                        out.insert(Permission {
                            group: group.clone(),
                            resource: resource.clone(),
                            verb: verb.clone(),
                            name: name.clone(),
                        });
                    }
                }
            }
        }
    }
    out
}

fn uses(request: &Request, permission: &Permission) -> bool {
    // A server-side apply that creates its object is logged as a patch answered 201, and
    // authorized as a create.
    let verb_used = request.verb == permission.verb
        || (permission.verb == "create" && request.verb == "patch" && request.code == Some(201));
    request.group == permission.group
        && request.resource == permission.resource
        && verb_used
        && permission
            .name
            .as_ref()
            .is_none_or(|n| request.name.as_ref() == Some(n))
        && request.code.is_some_and(authorized)
}

/// Whether RBAC let the request through: answered, and not refused. A 404 (a GET of an object
/// that does not exist yet), a 409 (a conflict) or a 422 (an invalid object) come from the
/// handler, after authorization; 401, 403 and 429 (API priority and fairness, which runs before
/// authorization) and the 5xx do not say.
fn authorized(code: u16) -> bool {
    code < 400 || [404, 409, 422].contains(&code)
}

/// The refused requests and the permissions no request used, as one list of findings.
pub fn findings(
    requests: &[Request],
    granted: &BTreeSet<Permission>,
    exceptions: &[(&str, &str)],
) -> Vec<String> {
    let forbidden: BTreeSet<String> = requests
        .iter()
        .filter(|r| r.code == Some(403))
        .map(|r| format!("refused: {r}"))
        .collect();
    let unused = granted
        .iter()
        .filter(|p| !requests.iter().any(|r| uses(r, p)))
        .filter(|p| !exceptions.iter().any(|(e, _)| *e == p.to_string()))
        .map(|p| format!("granted, never used: {p}"));
    forbidden.into_iter().chain(unused).collect()
}

pub fn trials() -> Vec<Trial> {
    vec![Trial::test(
        "audit::finds_refusals_and_unused_grants",
        || checker_finds_both().map_err(|e| crate::chain(&e).into()),
    )]
}

/// The checker itself can fail: a refusal and an unused verb are both reported, a used or
/// excepted permission is not; a GET answered 404 used its permission, a request throttled
/// before authorization (429) did not.
fn checker_finds_both() -> Result<()> {
    let log = [
        r#"{"verb":"get","user":{"username":"sa"},"objectRef":{"resource":"secrets","name":"a"},"responseStatus":{"code":200}}"#,
        r#"{"verb":"create","user":{"username":"sa"},"objectRef":{"resource":"serviceaccounts","subresource":"token","name":"r"},"responseStatus":{"code":201}}"#,
        r#"{"verb":"list","user":{"username":"sa"},"objectRef":{"resource":"configmaps"},"responseStatus":{"code":403}}"#,
        r#"{"verb":"delete","user":{"username":"other"},"objectRef":{"resource":"secrets","name":"a"},"responseStatus":{"code":200}}"#,
        r#"{"verb":"get","user":{"username":"sa"},"requestURI":"/apis"}"#,
        r#"{"verb":"patch","user":{"username":"sa"},"objectRef":{"resource":"configmaps","name":"c"},"responseStatus":{"code":201}}"#,
        r#"{"verb":"get","user":{"username":"sa"},"objectRef":{"resource":"configmaps","name":"gone"},"responseStatus":{"code":404}}"#,
        r#"{"verb":"list","user":{"username":"sa"},"objectRef":{"resource":"secrets"},"responseStatus":{"code":429}}"#,
    ]
    .join("\n");
    let requests = requests(&log, "sa")?;
    let rules: Vec<PolicyRule> = serde_json::from_value(serde_json::json!([
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "delete"]},
        {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "get"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
         "resourceNames": ["a", "b"], "verbs": ["patch"]},
    ]))?;
    let found = findings(
        &requests,
        &permissions(&rules),
        &[(
            "patch apiextensions.k8s.io/customresourcedefinitions b",
            "why",
        )],
    );
    ensure!(
        found
            == [
                "refused: list core/configmaps",
                "granted, never used: delete core/secrets",
                "granted, never used: list core/secrets",
                "granted, never used: patch apiextensions.k8s.io/customresourcedefinitions a",
            ],
        "findings: {found:#?}"
    );
    Ok(())
}
