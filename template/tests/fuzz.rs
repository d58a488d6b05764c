//! Fuzzing the engine and its parsers with what a tenant controls: template texts built from
//! the language's grammar (so that they get past the parser and reach the executor and the
//! functions), YAML built from YAML's syntax, and arbitrary bytes as data. Every render ends,
//! with output or an error, within its budget: no panic, no abort, no unbounded time.
//!
//! The seed is fixed and failures are not persisted, so a run is the same everywhere; proptest
//! prints the smallest input that fails.
//!
//! Memory is bounded too: this test binary's allocator keeps the peak of what is allocated, and
//! a render may hold at most [`MEMORY`] more than was held when it started (cases run one at a
//! time). A YAML alias bomb of 200 bytes needed gigabytes before the decoder refused excessive
//! aliasing.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use external_secrets_template::{Budget, Error, Funcs, Template, Value, go_string};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

const LIMIT: usize = 16 * 1024;
const STEPS: u64 = 20_000;
const TIME: Duration = Duration::from_secs(1);
/// The most one render may hold at once.
const MEMORY: usize = 64 << 20;

#[global_allocator]
static ALLOCATOR: peak_alloc::PeakAlloc = peak_alloc::PeakAlloc;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(21),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn funcs() -> &'static Funcs {
    static FUNCS: OnceLock<Funcs> = OnceLock::new();
    FUNCS.get_or_init(Funcs::eso)
}

/// Renders on a thread with a worker's 2 MiB stack, as the operator does, and checks the
/// render kept to its budget's time (with room for one call, which is not interrupted) and
/// held at most [`MEMORY`] at once.
fn render(text: String, data: BTreeMap<String, Vec<u8>>) -> Result<String, Error> {
    let data = Value::Map(
        data.into_iter()
            .map(|(k, v)| (k, Value::String(go_string(&v))))
            .collect(),
    );
    // One render at a time: the allocator's peak is the process's, and another test's render
    // would reset it or add to it.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let started = Instant::now();
    let before = ALLOCATOR.current_usage();
    ALLOCATOR.reset_peak_usage();
    let out = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let mut budget = Budget::new(STEPS, TIME);
            Template::parse("fuzz", &text, funcs())?.execute_within(&data, LIMIT, &mut budget)
        })
        .expect("a thread")
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    let held = ALLOCATOR.peak_usage().saturating_sub(before);
    assert!(held <= MEMORY, "held {} MiB at once", held >> 20);
    assert!(started.elapsed() < TIME * 5, "took {:?}", started.elapsed());
    if let Ok(text) = &out {
        assert!(text.len() <= LIMIT);
    }
    out
}

fn data(pairs: &[(&str, &[u8])]) -> BTreeMap<String, Vec<u8>> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.to_vec()))
        .collect()
}

/// The data every grammar template runs over.
fn sample_data() -> BTreeMap<String, Vec<u8>> {
    data(&[
        ("a", b"x"),
        ("n", b"3"),
        ("json", br#"{"k":[1,"v",{"m":null}],"n":1.5}"#),
        ("yaml", b"a: &x [1, b]\nb: *x\nc:\n  <<: {d: 1}\n"),
        ("bin", &[0, 159, 146, 150, 255]),
    ])
}

/// Go's builtins and the table's functions.
fn function_names() -> Vec<&'static str> {
    const BUILTINS: &[&str] = &[
        "and", "or", "not", "len", "index", "slice", "print", "printf", "println", "html", "js",
        "urlquery", "eq", "ne", "lt", "le", "gt", "ge", "call",
    ];
    let mut names = BUILTINS.to_vec();
    names.extend(funcs().names().copied());
    names
}

#[rustfmt::skip]
const LITERALS: &[&str] = &[
    "0", "1", "-1", "3", "64", "1.5", "-0.0", "1e3", "0x1F", "'c'", "9223372036854775807",
    "true", "false", "nil", ".", ".a", ".n", ".json", ".yaml", ".bin", "$", "$x", "$.a",
    r#""""#, r#""a""#, r#""%d %s %v %q %x %T %5.2f %!""#, r#""(a*)""#, r#""$1""#,
    r#""aGk=""#, r#""2024-01-02T03:04:05Z""#, r#""2006-01-02""#, r#""1h30m""#,
    r#""{\"a\":[1,{\"b\":null}]}""#, r#""[1,2,3]""#, r#""a: &x [1]\nb: [*x, *x]""#,
    r#""rsa""#, r#""ecdsa""#, r#""1.2.3""#, r#""^1.0""#, r#""a,b,c""#, r#"",""#,
    r#""é😀\u0085""#, "`raw\\n`",
];

/// An operand: a literal, a variable, a field, or a parenthesised call or pipeline.
fn operand() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        4 => prop::sample::select(LITERALS).prop_map(str::to_owned),
        1 => any::<String>().prop_map(|s| format!("`{}`", s.replace('`', ""))),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            (
                prop::sample::select(function_names()),
                prop::collection::vec(inner.clone(), 0..4)
            )
                .prop_map(|(f, args)| format!("({f} {})", args.join(" "))),
            (
                inner.clone(),
                prop::sample::select(function_names()),
                prop::collection::vec(inner, 0..3)
            )
                .prop_map(|(a, f, args)| format!("({a} | {f} {})", args.join(" "))),
        ]
    })
}

/// A pipeline: a command, maybe piped into further calls.
fn pipeline() -> impl Strategy<Value = String> {
    let command = prop_oneof![
        operand(),
        (
            prop::sample::select(function_names()),
            prop::collection::vec(operand(), 0..4)
        )
            .prop_map(|(f, args)| format!("{f} {}", args.join(" "))),
    ];
    (
        command,
        prop::collection::vec(
            (
                prop::sample::select(function_names()),
                prop::collection::vec(operand(), 0..3),
            ),
            0..3,
        ),
    )
        .prop_map(|(first, rest)| {
            let mut out = first;
            for (f, args) in rest {
                out.push_str(&format!(" | {f} {}", args.join(" ")));
            }
            out
        })
}

/// A template body: text, actions, assignments and the control structures around bodies.
fn body() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        prop::sample::select(&["", "text", "\n", " "][..]).prop_map(str::to_owned),
        pipeline().prop_map(|p| format!("{{{{ {p} }}}}")),
        pipeline().prop_map(|p| format!("{{{{ $x = {p} }}}}")),
        pipeline().prop_map(|p| format!("{{{{- $y := {p} -}}}}")),
        Just(r#"{{ template "t" . }}"#.to_owned()),
    ];
    leaf.prop_recursive(3, 16, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 1..4).prop_map(|parts| parts.concat()),
            (pipeline(), inner.clone(), inner.clone())
                .prop_map(|(p, a, b)| format!("{{{{ if {p} }}}}{a}{{{{ else }}}}{b}{{{{ end }}}}")),
            (
                pipeline(),
                inner.clone(),
                prop::sample::select(&["", "{{ break }}", "{{ continue }}"][..])
            )
                .prop_map(|(p, a, c)| format!("{{{{ range $i, $v := {p} }}}}{a}{c}{{{{ end }}}}")),
            (pipeline(), inner.clone())
                .prop_map(|(p, a)| format!("{{{{ with {p} }}}}{a}{{{{ end }}}}")),
        ]
    })
}

/// A whole template: `$x` declared, a `define`d template that may call itself.
fn template() -> impl Strategy<Value = String> {
    (body(), body()).prop_map(|(define, main)| {
        format!(
            r#"{{{{ define "t" }}}}{{{{ $x := 1 }}}}{define}{{{{ end }}}}{{{{ $x := 1 }}}}{main}"#
        )
    })
}

#[rustfmt::skip]
const YAML_TOKENS: &[&str] = &[
    "a", "b", "k", ": ", "- ", "\n", "  ", "    ", "&x ", "*x", "&y ", "*y", "<<: ", "[", "]",
    "{", "}", ", ", "? ", "!!str ", "!!int ", "!!float ", "!!bool ", "!!null ", "!!binary ",
    "!!merge ", "!!map ", "!!seq ", "!custom ", "|", "|-", ">", ">+", "'q''s'", "\"q\\n\"", "~",
    "null", "1", "-1", "1.5", ".inf", "-.nan", "0x1F", "0o17", "1e400", "18446744073709551616",
    "true", "y", "off", "2001-12-14t21:59:43.10-05:00", "---\n", "...\n", "#c\n", "%YAML 1.1\n",
    "\t", "\u{85}", "é",
];

fn yaml_soup() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(YAML_TOKENS), 0..60).prop_map(|t| t.concat())
}

/// What each decoder is fed through: its result printed, encoded and re-encoded.
const DECODERS: &[&str] = &[
    "{{ fromYaml .in | toJson }}",
    "{{ fromYaml .in | toYaml | fromYaml }}",
    "{{ fromJson .in | toYaml }}",
    "{{ mustFromJson .in | toPrettyJson }}",
    "{{ .in | b64dec | fromJson }}",
    "{{ .in | b64enc | b64dec | fromYaml }}",
];

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn grammar_templates_render_or_are_refused_within_budget(text in template()) {
        let _ = render(text, sample_data());
    }

    #[test]
    fn yaml_soup_decodes_or_is_refused(doc in yaml_soup(), decoder in prop::sample::select(DECODERS)) {
        let _ = render(decoder.to_owned(), data(&[("in", doc.as_bytes())]));
    }

    #[test]
    fn arbitrary_bytes_decode_or_are_refused(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        decoder in prop::sample::select(DECODERS),
    ) {
        let _ = render(decoder.to_owned(), data(&[("in", &bytes)]));
    }

    #[test]
    fn arbitrary_texts_render_or_are_refused(text in any::<String>()) {
        let _ = render(text, sample_data());
    }
}

/// Found by the fuzzing above: a number's text whose second character is not ASCII panicked.
#[test]
fn a_number_with_a_multibyte_character_is_not_a_panic() {
    // Go's sprig reads what is no number as 0.
    assert_eq!(
        render(r#"{{ addf "0Σ" 1 }}"#.to_owned(), sample_data()).as_deref(),
        Ok("1")
    );
}

/// The alias bomb the memory bound is for: seven levels of nine aliases each are 4.8 million
/// scalars once expanded, refused as Go refuses them, within the bound.
#[test]
fn an_alias_bomb_stays_within_memory() {
    let mut yaml = String::from("a0: &a0 [x,x,x,x,x,x,x,x,x]\n");
    for i in 1..7 {
        yaml.push_str(&format!(
            "a{i}: &a{i} [{}]\n",
            vec![format!("*a{}", i - 1); 9].join(",")
        ));
    }
    let out = render(
        "{{ fromYaml .in | toJson }}".to_owned(),
        data(&[("in", yaml.as_bytes())]),
    );
    assert!(
        out.as_deref()
            .is_ok_and(|o| o.contains("excessive aliasing")),
        "{out:?}"
    );
}
