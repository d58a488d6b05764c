//! Input a tenant controls (a template, or a value in the backend it reads) cannot make the
//! operator run out of memory, overflow a stack or hang.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use external_secrets_template::{Funcs, Template, Value};

fn render(text: &str, pairs: &[(&str, &str)]) -> String {
    let data = Value::Map(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value::from(*v)))
            .collect::<BTreeMap<_, _>>(),
    );
    let funcs = Funcs::eso();
    match Template::parse("t", text, &funcs).and_then(|t| t.execute(&data, 1 << 20)) {
        Ok(out) => out,
        Err(e) => format!("ERR:{e}"),
    }
}

/// Runs `f` on a thread with a worker's 2 MiB stack, as the operator does.
fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(f)
        .expect("a thread")
        .join()
        .expect("no panic")
}

/// `levels` anchors, each a list of nine aliases of the one before: 9^levels scalars.
fn laughs(levels: usize) -> String {
    let mut yaml = String::from("a0: &a0 [x,x,x,x,x,x,x,x,x]\n");
    for i in 1..levels {
        let prev = format!("*a{}", i - 1);
        yaml.push_str(&format!("a{i}: &a{i} [{}]\n", vec![prev; 9].join(",")));
    }
    yaml
}

#[test]
fn billion_laughs_is_refused_as_go_refuses_it() {
    for levels in [6, 9] {
        let started = Instant::now();
        let out = render("{{ fromYaml .y | toJson }}", &[("y", &laughs(levels))]);
        assert_eq!(
            out,
            r#"{"Error":"error converting YAML to JSON: yaml: document contains excessive aliasing"}"#,
            "{levels} levels"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{levels} levels"
        );
    }
}

#[test]
fn anchors_aliases_and_merges_still_work() {
    let yaml = "base: &base {user: ada, port: 5432}\nprod:\n  <<: *base\n  port: 6543\nboth: [*base, *base]\n";
    assert_eq!(
        render("{{ fromYaml .y | toJson }}", &[("y", yaml)]),
        r#"{"base":{"port":5432,"user":"ada"},"both":[{"port":5432,"user":"ada"},{"port":5432,"user":"ada"}],"prod":{"port":6543,"user":"ada"}}"#
    );
    // A document mostly made of aliases, but small, is accepted as Go accepts it.
    assert!(!render("{{ fromYaml .y | toJson }}", &[("y", &laughs(3))]).contains("Error"));
}

#[test]
fn deep_yaml_is_refused_not_a_stack_overflow() {
    let depth = 100_000;
    let documents = [
        format!("a: {}x", "- ".repeat(depth)),
        format!("a: {}x{}", "[".repeat(depth), "]".repeat(depth)),
        format!("a: {}x: 1{}", "{".repeat(depth), "}".repeat(depth)),
        // Block mappings nest by indentation, whose text grows with the square of the depth.
        (0..3_000)
            .map(|i| format!("{}k:\n", " ".repeat(i)))
            .collect(),
        // Shallow anchors whose aliases nest each other ever deeper once expanded.
        std::iter::once("a0: &a0 [[[[[[[[[[x]]]]]]]]]]\n".to_owned())
            .chain((1..200).map(|i| format!("a{i}: &a{i} [[[[[[[[[[*a{}]]]]]]]]]]\n", i - 1)))
            .collect(),
    ];
    let outs = on_small_stack(move || {
        documents
            .iter()
            .map(|y| render("{{ fromYaml .y | toJson }}", &[("y", y)]))
            .collect::<Vec<_>>()
    });
    for out in outs {
        assert!(
            out.starts_with(r#"{"Error":"error converting YAML to JSON: yaml: "#),
            "{}",
            &out[..out.len().min(200)]
        );
    }
}
