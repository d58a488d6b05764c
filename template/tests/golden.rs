//! The golden corpus: every case of `tests/golden/cases.yaml` must render byte for byte what Go's
//! text/template and sprig rendered for it (`tests/golden/expected.json`, written by
//! `hack/template-golden`), or be refused where Go refused it. All cases run; the failure lists
//! each one that differs, so one run shows the whole picture.
//!
//! `GOLDEN_FILTER=<substring>` runs only the cases whose name contains it.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{self, AssertUnwindSafe};

use external_secrets_template::{Error, Funcs, Template, Value};
use serde::Deserialize;

/// ESO renders into memory; 1 MiB is far above any case's output.
const LIMIT: usize = 1 << 20;
/// A mismatch report shows at most this many characters of any one value.
const SHOW: usize = 200;

const CASES: &str = include_str!("golden/cases.yaml");
const EXPECTED: &str = include_str!("golden/expected.json");

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    template: String,
    #[serde(default)]
    data: BTreeMap<String, String>,
    /// Why this case renders differently from Go on purpose. Such a case must still differ:
    /// one that starts to match has its note removed, so the list of differences stays true.
    #[serde(default)]
    differs: Option<String>,
}

/// What Go did: `output`, or `error` with Go's message (for the reader; ours need not match).
/// `template` and `data` are the case as Go's YAML library read it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Expected {
    name: String,
    template: String,
    #[serde(default)]
    data: BTreeMap<String, String>,
    #[serde(default)]
    output: Option<String>,
    #[serde(default)]
    error: bool,
    #[serde(default)]
    message: Option<String>,
}

enum Outcome {
    Rendered(String),
    Refused(Error),
    /// A panic is a defect whatever Go did: a template is user input.
    Panicked(String),
}

#[test]
fn golden_cases_render_as_go_renders() {
    let cases: Vec<Case> = serde_yaml::from_str(CASES).expect("cases.yaml is a list of cases");
    let results: Vec<Expected> =
        serde_json::from_str(EXPECTED).expect("expected.json is a list of results");
    let expected = expected_by_name(&cases, &results);
    let filter = std::env::var("GOLDEN_FILTER").unwrap_or_default();
    let funcs = Funcs::eso();

    // Panics are caught and reported per case; the default hook would print each one too.
    let hook = panic::take_hook();
    panic::set_hook(Box::new(|_| {}));
    let mut run = 0;
    let mut mismatches = Vec::new();
    let mut known = 0;
    for case in cases.iter().filter(|c| c.name.contains(&filter)) {
        run += 1;
        let outcome = render(case, &funcs);
        let problem = compare(expected[case.name.as_str()], &outcome);
        match (problem, &case.differs) {
            (Some(_), Some(_)) => known += 1,
            (None, Some(why)) => mismatches.push(format!(
                "- {}\n    marked as differing ({why}) but renders as Go does: remove `differs`",
                case.name
            )),
            (Some(problem), None) => mismatches.push(format!(
                "- {}\n    template: {}\n    {problem}",
                case.name,
                show(&case.template)
            )),
            (None, None) => {}
        }
    }
    panic::set_hook(hook);
    eprintln!("{run} golden cases, {known} of them known to differ from Go (see `differs`)");

    assert!(run > 0, "no golden case matches GOLDEN_FILTER={filter:?}");
    assert!(
        mismatches.is_empty(),
        "{} of {run} golden cases differ from Go:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

/// expected.json must hold exactly one result per case, for the case as we read it: a stale
/// file means the generator was not run after cases.yaml changed, and a case read differently
/// means the two YAML libraries disagree (rewrite that case more plainly).
fn expected_by_name<'a>(
    cases: &[Case],
    results: &'a [Expected],
) -> BTreeMap<&'a str, &'a Expected> {
    let mut by_name = BTreeMap::new();
    for e in results {
        assert!(
            e.output.is_some() != e.error,
            "expected.json: {} must have either an output or error: true",
            e.name
        );
        assert!(
            by_name.insert(e.name.as_str(), e).is_none(),
            "expected.json: {} appears twice",
            e.name
        );
    }
    let names: BTreeSet<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names.len(), cases.len(), "cases.yaml: a name appears twice");
    let missing: Vec<_> = names.iter().filter(|n| !by_name.contains_key(*n)).collect();
    let stale: Vec<_> = by_name.keys().filter(|n| !names.contains(*n)).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "expected.json is out of date (run hack/template-golden): no result for {missing:?}; \
         results for no case {stale:?}"
    );
    let misread: Vec<_> = cases
        .iter()
        .filter(|c| {
            let e = by_name[c.name.as_str()];
            e.template != c.template || e.data != c.data
        })
        .map(|c| c.name.as_str())
        .collect();
    assert!(
        misread.is_empty(),
        "cases.yaml is read differently here than by the generator (Go's YAML library), \
         or expected.json is out of date: {misread:?}"
    );
    by_name
}

/// As ESO does: parse with the case name as the template's name, then execute over the data
/// as strings.
fn render(case: &Case, funcs: &Funcs) -> Outcome {
    let data = Value::Map(
        case.data
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    );
    let attempt = panic::catch_unwind(AssertUnwindSafe(|| {
        Template::parse(&case.name, &case.template, funcs)?.execute(&data, LIMIT)
    }));
    match attempt {
        Ok(Ok(out)) => Outcome::Rendered(out),
        Ok(Err(e)) => Outcome::Refused(e),
        Err(payload) => Outcome::Panicked(
            payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".to_owned()),
        ),
    }
}

/// None when we did what Go did; else what differs.
fn compare(expected: &Expected, outcome: &Outcome) -> Option<String> {
    let go = match (&expected.output, &expected.message) {
        (Some(out), _) => format!("Go rendered {}", show(out)),
        (None, Some(msg)) => format!("Go refused: {}", show(msg)),
        (None, None) => "Go refused".to_owned(),
    };
    let ours = match outcome {
        Outcome::Rendered(out) if expected.output.as_deref() == Some(out.as_str()) => return None,
        Outcome::Refused(_) if expected.error => return None,
        Outcome::Rendered(out) => format!("we rendered {}", show(out)),
        Outcome::Refused(e) => format!("we refused: {}", show(&e.to_string())),
        Outcome::Panicked(msg) => format!("we PANICKED: {}", show(msg)),
    };
    Some(format!("{go}\n    {ours}"))
}

/// A value as a Rust string literal, cut to [`SHOW`] characters.
fn show(s: &str) -> String {
    let quoted = format!("{s:?}");
    match quoted.char_indices().nth(SHOW) {
        Some((cut, _)) => format!("{}… ({} bytes)", &quoted[..cut], s.len()),
        None => quoted,
    }
}
