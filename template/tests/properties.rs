//! Properties that hold for every input, since a template is user input: any text is rendered
//! or refused with an `Error` (never a panic, never a crashed stack), output stays within the
//! limit, and a template reads nothing but its data.

use std::sync::OnceLock;

use external_secrets_template::{Error, Funcs, Template, Value};
use proptest::prelude::*;

const LIMIT: usize = 64 * 1024;

fn funcs() -> &'static Funcs {
    static FUNCS: OnceLock<Funcs> = OnceLock::new();
    FUNCS.get_or_init(Funcs::eso)
}

fn data(pairs: &[(&str, &str)]) -> Value {
    Value::Map(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Value::from(*v)))
            .collect(),
    )
}

fn sample_data() -> Value {
    data(&[("a", "x"), ("b", "1"), ("json", r#"{"k":[1,"v"]}"#)])
}

/// Parses and executes; the caller's property is that this returns at all.
fn run(text: &str, data: &Value, limit: usize) -> Result<String, Error> {
    Template::parse("prop", text, funcs())?.execute(data, limit)
}

/// Pieces of template syntax, so that random sequences of them reach the parser's and the
/// executor's deeper paths, which random characters rarely do. Numbers stay small: nested
/// ranges multiply.
#[rustfmt::skip]
const TOKENS: &[&str] = &[
    "{{", "}}", "{{- ", " -}}", "{{/* c */}}", "/*", "*/", " ", "\n", "text", ".", ".a", ".b",
    ".json", ".a.b", "$", "$x", "$y", " := ", " = ", "|", "(", ")", ",", "if", "else", "else if",
    "end", "range", "with", "else with", "define", "template", "block", "break", "continue",
    "\"t\"", "\"s\"", "\"\"", "`raw`", "\"%d %s %v %q\"", "0", "1", "2", "-1", "1.5", "2e0",
    "0x10", "'c'", "true", "false", "nil", "and", "or", "not", "eq", "ne", "lt", "len", "index",
    "slice", "print", "printf", "println", "html", "js", "urlquery", "call", "upper", "quote",
    "list", "dict", "default", "toJson", "fromJson", "until", "repeat", "b64dec", "add", "div",
    "mod", "first", "dig", "get", "set", "regexReplaceAll", "\"(a*)\"", "\"$1\"",
];

fn token_soup() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(TOKENS), 0..40).prop_map(|t| t.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn any_text_is_rendered_or_refused(text in any::<String>()) {
        let _ = run(&text, &sample_data(), LIMIT);
    }

    #[test]
    fn any_token_soup_is_rendered_or_refused(text in token_soup()) {
        let _ = run(&text, &sample_data(), LIMIT);
    }

    #[test]
    fn any_action_of_token_soup_is_rendered_or_refused(inner in token_soup()) {
        let _ = run(&format!("{{{{ {inner} }}}}"), &sample_data(), LIMIT);
    }

    #[test]
    fn output_never_exceeds_the_limit(text in token_soup(), limit in 0usize..256) {
        if let Ok(out) = run(&text, &sample_data(), limit) {
            prop_assert!(out.len() <= limit, "{} bytes rendered under a limit of {limit}", out.len());
        }
    }

    /// A data value is text, never a template: whatever it holds comes out as it went in.
    #[test]
    fn data_values_come_out_verbatim(value in any::<String>()) {
        let d = data(&[("v", &value)]);
        for text in [
            "{{ .v }}",
            r#"{{ index . "v" }}"#,
            "{{ print .v }}",
            r#"{{ printf "%s" .v }}"#,
            "{{ .v | toString }}",
            "{{ .v | b64enc | b64dec }}",
            "{{ .v | toJson | fromJson }}",
            "{{ with $x := .v }}{{ $x }}{{ end }}",
        ] {
            prop_assert_eq!(run(text, &d, usize::MAX), Ok(value.clone()), "{}", text);
        }
    }

    /// Any key, even one no field syntax can name, is reachable through index.
    #[test]
    fn any_key_is_reachable_with_index(key in any::<String>(), value in any::<String>()) {
        let d = data(&[(&key, &value)]);
        let text = format!("{{{{ index . {} }}}}", go_quote(&key));
        prop_assert_eq!(run(&text, &d, usize::MAX), Ok(value));
    }

    /// Three-argument calls of every function, on values of every kind (see
    /// `every_function_with_up_to_two_arguments_is_called_or_refused` for fewer).
    #[test]
    fn every_function_with_three_arguments_is_called_or_refused(
        name in prop::sample::select(callable_names()),
        args in prop::collection::vec(prop::sample::select(ARGS), 3),
    ) {
        let _ = run(&format!("{{{{ {name} {} }}}}", args.join(" ")), &sample_data(), LIMIT);
        let _ = run(&format!("{{{{ {} | {name} {} }}}}", args[0], args[1..].join(" ")), &sample_data(), LIMIT);
    }
}

/// A Go double-quoted string literal for any text.
fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Arguments of every kind a function may meet.
#[rustfmt::skip]
const ARGS: &[&str] = &[
    "0", "1", "-1", "3", "1.5", "\"s\"", "\"\"", "\"2006-01-02\"", "true", ".a", ".",
    "(list 1 \"a\")", "(dict \"k\" 1)", "(fromJson \"null\")", "(toDate \"2006\" \"2024\")",
];

/// Go's builtins and every function the table offers, except those that generate keys or
/// bcrypt hashes: correct but too slow to call thousands of times.
fn callable_names() -> Vec<&'static str> {
    const BUILTINS: &[&str] = &[
        "and", "or", "not", "len", "index", "slice", "print", "printf", "println", "html", "js",
        "urlquery", "eq", "ne", "lt", "le", "gt", "ge", "call",
    ];
    const SLOW: &[&str] = &[
        "genPrivateKey",
        "genCA",
        "genCAWithKey",
        "genSelfSignedCert",
        "genSelfSignedCertWithKey",
        "genSignedCert",
        "genSignedCertWithKey",
        "buildCustomCert",
        "bcrypt",
        "htpasswd",
    ];
    let mut names: Vec<&'static str> = BUILTINS.to_vec();
    names.extend(funcs().names().copied().filter(|n| !SLOW.contains(n)));
    names
}

#[test]
fn every_function_with_up_to_two_arguments_is_called_or_refused() {
    let d = sample_data();
    for name in callable_names() {
        let _ = run(&format!("{{{{ {name} }}}}"), &d, LIMIT);
        for a in ARGS {
            let _ = run(&format!("{{{{ {name} {a} }}}}"), &d, LIMIT);
            for b in ARGS {
                let _ = run(&format!("{{{{ {name} {a} {b} }}}}"), &d, LIMIT);
            }
        }
    }
}

#[test]
fn long_output_is_refused_as_too_large() {
    let d = sample_data();
    for (text, limit) in [
        ("{{ range $i := until 100000 }}xxxxxxxx{{ end }}", 4096),
        (
            "{{ range until 1000 }}{{ range until 1000 }}{{ repeat 1000 \"x\" }}{{ end }}{{ end }}",
            1 << 20,
        ),
        ("{{ repeat 10000000 \"x\" }}", 1 << 20),
        ("{{ range 1000000 }}{{ . }}{{ end }}", 1000),
        (
            "{{ define \"t\" }}{{ repeat 100 \"x\" }}{{ template \"t\" }}{{ end }}{{ template \"t\" }}",
            1000,
        ),
        ("{{ .a }}{{ .a }}", 1),
        ("xx", 1),
    ] {
        match run(text, &d, limit) {
            Err(Error::TooLarge { limit: l, .. }) => assert_eq!(l, limit, "{text}"),
            // A function that would build a string past the 1 MiB a Secret holds refuses
            // before allocating it.
            Err(Error::Exec { message, .. }) if message.contains("exceeds the limit") => {}
            other => panic!("{text} under a limit of {limit}: {other:?}"),
        }
    }
}

#[test]
fn output_exactly_at_the_limit_is_rendered() {
    assert_eq!(
        run("{{ repeat 10 \"x\" }}", &sample_data(), 10).as_deref(),
        Ok("xxxxxxxxxx")
    );
    assert_eq!(run("", &sample_data(), 0).as_deref(), Ok(""));
}

/// Go errors here too; an engine that tried would ask for exabytes.
#[test]
fn an_impossible_repeat_is_refused() {
    assert!(
        run(
            "{{ repeat 9223372036854775807 \"x\" }}",
            &sample_data(),
            LIMIT
        )
        .is_err()
    );
}

/// Deep nesting must be refused or rendered, not overflow the stack: the operator renders on
/// threads with small stacks, so this runs on one too (2 MiB, as tokio's workers).
#[test]
fn deep_nesting_does_not_overflow_the_stack() {
    let depth = 100_000;
    let texts = [
        format!("{{{{ {}1{} }}}}", "(".repeat(depth), ")".repeat(depth)),
        format!(
            "{}x{}",
            "{{ if 1 }}".repeat(depth),
            "{{ end }}".repeat(depth)
        ),
        format!(
            "{}x{}",
            "{{ range list 1 }}".repeat(depth),
            "{{ end }}".repeat(depth)
        ),
        format!(
            "{{{{ {}1{} }}}}",
            "print (".repeat(depth),
            ")".repeat(depth)
        ),
    ];
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            for text in texts {
                let _ = run(&text, &sample_data(), LIMIT);
            }
        })
        .expect("a thread")
        .join()
        .expect("no panic");
}

/// A template reads its data and nothing else: the functions that read the environment or
/// the network are unknown, so a template naming one is refused before it runs.
#[test]
fn environment_and_network_functions_are_unknown() {
    for name in ["env", "expandenv", "getHostByName"] {
        assert!(funcs().get(name).is_none(), "{name} is offered");
        for text in [
            format!("{{{{ {name} \"HOME\" }}}}"),
            format!("{{{{ if false }}}}{{{{ {name} \"HOME\" }}}}{{{{ end }}}}"),
            format!("{{{{ \"HOME\" | {name} }}}}"),
        ] {
            match Template::parse("prop", &text, funcs()) {
                Err(Error::Parse { .. }) => {}
                other => panic!("{text}: {other:?}"),
            }
        }
    }
}

/// Rendering twice gives the same text: no hidden state survives an execution.
#[test]
fn rendering_is_repeatable() {
    let t = Template::parse(
        "prop",
        r#"{{ $l := list }}{{ range $k, $v := . }}{{ $l = append $l $k }}{{ end }}{{ $d := dict }}{{ $_ := set $d "n" (len $l) }}{{ toJson $d }} {{ $l }}"#,
        funcs(),
    )
    .expect("parses");
    let d = data(&[("a", "1"), ("b", "2")]);
    let first = t.execute(&d, LIMIT).expect("renders");
    assert_eq!(t.execute(&d, LIMIT).expect("renders"), first);
    assert_eq!(first, r#"{"n":2} [a b]"#);
}
