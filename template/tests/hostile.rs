//! Input a tenant controls (a template, or a value in the backend it reads) cannot make the
//! operator run out of memory, overflow a stack or hang.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use external_secrets_template::{Budget, Error, Exceeded, Funcs, Template, Value};

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

/// Refused at the call of `what` that the budget cannot pay for.
fn over_budget(text: &str, what: &str) {
    let mut budget = Budget::new(1_000_000, Duration::from_secs(600));
    let err = parse(text)
        .execute_within(&Value::Nil, 1024, &mut budget)
        .expect_err("over its steps");
    let message = err.to_string();
    assert!(
        message.contains(&format!(
            "template exceeded its budget of 1000000 steps: {what} costs "
        )),
        "{text}: {message}"
    );
}

/// Key generation and password hashing take milliseconds to a second a call: a loop of them
/// would hold a thread for minutes, so each call costs its share of the render's budget.
#[test]
fn a_loop_of_expensive_functions_stops_at_the_budget() {
    for (function, call) in [
        ("genPrivateKey", r#"genPrivateKey "rsa""#),
        ("genCA", r#"genCA "ca" 365"#),
        ("genSelfSignedCert", r#"genSelfSignedCert "a" nil nil 1"#),
        ("bcrypt", r#"bcrypt "x""#),
        ("htpasswd", r#"htpasswd "u" "x""#),
        ("derivePassword", r#"derivePassword 1 "long" "p" "u" "s""#),
    ] {
        over_budget(
            &format!("{{{{ range until 100000 }}}}{{{{ $_ := {call} }}}}{{{{ end }}}}"),
            function,
        );
    }
    // With the budget every render gets, quickly.
    let started = Instant::now();
    let out = render(
        r#"{{ range until 1000 }}{{ $_ := genPrivateKey "rsa" }}{{ end }}"#,
        &[],
    );
    assert!(
        out.contains(r#"at <genPrivateKey "rsa">: template exceeded its"#),
        "{out}"
    );
    assert!(started.elapsed() < Duration::from_secs(15));
}

/// One RSA key, a few bcrypt hashes: what real templates do stays well within the budget's
/// steps. (Its time is not what is tested: password hashing is slow in a debug build.)
#[test]
fn ordinary_use_of_expensive_functions_is_within_the_budget() {
    let t = parse(
        r#"{{ $k := genPrivateKey "rsa" }}{{ $c := genSelfSignedCert "a" nil nil 1 }}{{ bcrypt "a" | len }} {{ htpasswd "u" "p" | len }} {{ derivePassword 1 "long" "p" "u" "s" | len }}"#,
    );
    let mut budget = Budget::new(Budget::DEFAULT_STEPS, Duration::from_secs(600));
    assert_eq!(
        t.execute_within(&Value::Nil, 1024, &mut budget).as_deref(),
        Ok("60 62 14")
    );
}

/// Values that double at each step would need exabytes: what function results hold is
/// charged to the budget too (a step for every 16 bytes), so the doubling stops once it has
/// built about what the budget allows.
#[test]
fn doubling_values_stop_at_the_budget() {
    for text in [
        "{{ $x := list 1 }}{{ range until 64 }}{{ $x = list $x $x }}{{ end }}{{ len $x }}",
        r#"{{ $x := "ab" }}{{ range until 64 }}{{ $x = print $x $x }}{{ end }}{{ len $x }}"#,
        r#"{{ $d := dict }}{{ range until 64 }}{{ $d = dict "a" $d "b" $d }}{{ end }}{{ len $d }}"#,
    ] {
        let t = parse(text);
        let mut budget = Budget::new(1_000_000, Duration::from_secs(600));
        let err = on_small_stack(move || t.execute_within(&Value::Nil, 1024, &mut budget))
            .expect_err("over its steps");
        assert!(
            err.to_string()
                .ends_with("template exceeded its budget of 1000000 steps"),
            "{text}: {err}"
        );
    }
}

/// A value nested ever deeper by a loop would be dropped, printed and encoded recursively:
/// it is refused at the depth the decoders allow.
#[test]
fn values_nested_by_a_loop_are_refused_not_a_stack_overflow() {
    for text in [
        "{{ $x := list }}{{ range until 100000 }}{{ $x = list $x }}{{ end }}{{ len $x }}",
        r#"{{ $x := dict }}{{ range until 100000 }}{{ $x = dict "k" $x }}{{ end }}{{ len $x }}"#,
        "{{ $x := list }}{{ range until 100000 }}{{ $x = append (list) $x }}{{ end }}{{ toJson $x }}",
    ] {
        let out = on_small_stack(move || render(text, &[]));
        assert!(
            out.starts_with("ERR:") && out.contains("nested deeper than 1000 levels"),
            "{text}: {out}"
        );
    }
}

/// The deepest value a decoder builds can still be printed, encoded and dropped on a
/// worker's stack.
#[test]
fn the_deepest_decoded_values_fit_a_small_stack() {
    let json = format!("{}{}", "[".repeat(1000), "]".repeat(1000));
    let yaml = format!("a: {}{}", "[".repeat(250), "]".repeat(250));
    let outs = on_small_stack(move || {
        [
            render("{{ fromJson .j | toJson | len }}", &[("j", &json)]),
            render("{{ fromJson .j | len }} {{ fromJson .j }}", &[("j", &json)])
                .len()
                .to_string(),
            render("{{ fromYaml .y | toYaml | len }}", &[("y", &yaml)]),
        ]
    });
    assert_eq!(outs, ["2000", "2002", "503"]);
}

fn parse(text: &str) -> Template {
    Template::parse("t", text, &Funcs::eso()).expect("parses")
}

/// The clock is read between steps, so a render that would run long ends at its time
/// budget, with an error that says so.
#[test]
fn a_render_ends_at_its_time_budget() {
    let t = parse("{{ range until 1000000 }}{{ range until 1000000 }}{{ end }}{{ end }}");
    let mut budget = Budget::new(u64::MAX, Duration::from_millis(200));
    let started = Instant::now();
    let err = t
        .execute_within(&Value::Nil, 1024, &mut budget)
        .expect_err("over its time");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        matches!(&err, Error::OverBudget { exceeded, .. } if matches!(**exceeded, Exceeded::Time { .. })),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .ends_with("template exceeded its time budget of 200ms"),
        "{err}"
    );
}

/// One budget spans every template of a render: an ExternalSecret cannot multiply it by
/// its number of keys.
#[test]
fn one_budget_spans_the_templates_of_a_render() {
    let t = parse("{{ range 600 }}{{ end }}");
    let mut budget = Budget::new(1000, Duration::from_secs(60));
    assert_eq!(
        t.execute_within(&Value::Nil, 1024, &mut budget).as_deref(),
        Ok("")
    );
    let err = t
        .execute_within(&Value::Nil, 1024, &mut budget)
        .expect_err("over its steps");
    assert!(
        err.to_string()
            .ends_with("template exceeded its budget of 1000 steps"),
        "{err}"
    );
}

#[test]
fn the_expensive_call_is_named() {
    let t = parse(r#"{{ range until 10 }}{{ $_ := bcrypt "x" }}{{ end }}"#);
    let err = t
        .execute_within(
            &Value::Nil,
            1024,
            &mut Budget::new(1_000_000, Duration::from_secs(60)),
        )
        .expect_err("over its steps");
    assert!(
        err.to_string().contains(
            "at <bcrypt \"x\">: template exceeded its budget of 1000000 steps: bcrypt costs"
        ),
        "{err}"
    );
}

/// A controller renders on a blocking thread (`spawn_blocking`), so all of it moves there.
#[test]
fn a_render_can_move_to_another_thread() {
    fn send<T: Send + 'static>(_: &T) {}
    let t = parse("{{ .a }}");
    let data = Value::Map(BTreeMap::from([("a".to_owned(), Value::from("x"))]));
    let mut budget = Budget::default();
    send(&t);
    send(&data);
    send(&budget);
    let out = std::thread::spawn(move || t.execute_within(&data, 1024, &mut budget))
        .join()
        .expect("no panic");
    send(&out);
    assert_eq!(out.as_deref(), Ok("x"));
}

/// A variable, a field or dot passed to a function is copied into its arguments: copies are
/// charged by size as results are, so a loop copying a large value ends at the step budget
/// (with its error), long before the clock would stop it.
#[test]
fn copies_of_a_large_value_into_arguments_are_charged() {
    let big = "x".repeat(1 << 20);
    let data = Value::Map(BTreeMap::from([(
        "big".to_owned(),
        Value::from(big.as_str()),
    )]));
    let fields = format!(
        r#"{{{{ define "f" }}}}{}{{{{ end }}}}{{{{ range until 1000 }}}}{{{{ template "f" $ }}}}{{{{ end }}}}"#,
        "{{ $_ := len .big }}".repeat(100)
    );
    for text in [
        r#"{{ $big := repeat 1048576 "x" }}{{ range until 100000 }}{{ $_ := len $big }}{{ end }}"#,
        fields.as_str(),
        "{{ range until 100000 }}{{ $_ := len $.big }}{{ end }}",
        r#"{{ define "c" }}{{ $_ := len . }}{{ end }}{{ range until 100000 }}{{ template "c" $.big }}{{ end }}"#,
        "{{ range until 100000 }}{{ $_ := $.big }}{{ end }}",
    ] {
        let t = parse(text);
        let mut budget = Budget::new(Budget::DEFAULT_STEPS, Duration::from_secs(3));
        let started = Instant::now();
        let err = t
            .execute_within(&data, 1024, &mut budget)
            .expect_err("over its budget");
        assert!(
            matches!(&err, Error::OverBudget { exceeded, .. } if matches!(**exceeded, Exceeded::Steps { .. })),
            "{text}: {err}"
        );
        assert!(
            err.to_string()
                .ends_with("template exceeded its budget of 10000000 steps"),
            "{text}: {err}"
        );
        assert!(started.elapsed() < Duration::from_secs(3), "{text}");
    }
}
