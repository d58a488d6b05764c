use std::collections::BTreeMap;

use api::external_secret::Template;

use super::*;

fn template(yaml: &str) -> Template {
    serde_yaml::from_str(yaml).unwrap()
}

fn fetched(pairs: &[(&str, &[u8])]) -> BTreeMap<String, Vec<u8>> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect()
}

fn strings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn run(
    t: Option<&Template>,
    data: &[(&str, &[u8])],
    sources: &Sources,
) -> Result<Shaped, TemplateError> {
    shape(
        "spec.target.template",
        t,
        fetched(data),
        sources,
        &strings(&[("team", "a")]),
        &strings(&[("note", "n")]),
    )
}

#[test]
fn without_a_template_the_objects_labels_and_annotations_are_copied() {
    let out = run(None, &[("user", b"alice")], &Sources::default()).unwrap();
    assert_eq!(out.data, fetched(&[("user", b"alice")]));
    assert_eq!(out.labels, strings(&[("team", "a")]));
    assert_eq!(out.annotations, strings(&[("note", "n")]));
    assert_eq!(out.type_, None);
}

#[test]
fn data_templates_replace_or_merge_the_fetched_keys() {
    let t = template("data: {dsn: 'postgres://{{ .user }}:{{ .pass | upper }}@db'}");
    let out = run(
        Some(&t),
        &[("user", b"ada"), ("pass", b"pw")],
        &Sources::default(),
    )
    .unwrap();
    assert_eq!(out.data, fetched(&[("dsn", b"postgres://ada:PW@db")]));
    assert!(
        out.labels.is_empty(),
        "a template stops the object's labels being copied"
    );

    let t = template("mergePolicy: Merge\ndata: {dsn: '{{ .user }}'}");
    let out = run(Some(&t), &[("user", b"ada")], &Sources::default()).unwrap();
    assert_eq!(out.data, fetched(&[("dsn", b"ada"), ("user", b"ada")]));
}

#[test]
fn a_template_without_data_keeps_the_fetched_data_and_sets_type_and_metadata() {
    let t = template(
        "type: kubernetes.io/basic-auth\nmetadata: {labels: {owner: '{{ .user }}', fixed: x}, annotations: {a: '{{ len .user }}'}}",
    );
    let out = run(Some(&t), &[("user", b"ada")], &Sources::default()).unwrap();
    assert_eq!(out.data, fetched(&[("user", b"ada")]));
    assert_eq!(out.type_.as_deref(), Some("kubernetes.io/basic-auth"));
    assert_eq!(out.labels, strings(&[("fixed", "x"), ("owner", "ada")]));
    assert_eq!(out.annotations, strings(&[("a", "3")]));
}

#[test]
fn template_from_sources_scopes_targets_and_precedence() {
    let sources = Sources {
        config_maps: BTreeMap::from([(
            "tpl".to_owned(),
            strings(&[
                ("config.yaml", "user: {{ .user }}"),
                ("pairs", "k1: '{{ .user }}'\nk2: two"),
                ("labels", "tier: '{{ .user }}'"),
            ]),
        )]),
        secrets: BTreeMap::from([("stpl".to_owned(), fetched(&[("token", b"t-{{ .user }}")]))]),
    };
    let t = template(
        r#"
templateFrom:
- configMap: {name: tpl, items: [{key: config.yaml}, {key: pairs, templateAs: KeysAndValues}]}
- secret: {name: stpl, items: [{key: token}]}
- configMap: {name: tpl, items: [{key: labels, templateAs: KeysAndValues}]}
  target: Labels
- literal: "lit: '{{ .user }}!'"
  target: Annotations
data: {k2: from-data}
"#,
    );
    let out = run(Some(&t), &[("user", b"ada")], &sources).unwrap();
    assert_eq!(
        out.data,
        fetched(&[
            ("config.yaml", b"user: ada"),
            ("k1", b"ada"),
            ("k2", b"from-data"),
            ("token", b"t-ada"),
        ]),
        "template.data wins over templateFrom; fetched keys are not copied"
    );
    assert_eq!(out.labels, strings(&[("tier", "ada")]));
    assert_eq!(out.annotations, strings(&[("lit", "ada!")]));
}

#[test]
fn missing_sources_and_keys_are_named() {
    let t = template("templateFrom:\n- configMap: {name: gone, items: [{key: a}]}");
    let err = run(Some(&t), &[], &Sources::default()).unwrap_err();
    assert_eq!(
        err.field,
        "spec.target.template.templateFrom[0].configMap.name"
    );
    assert!(err.message.contains("\"gone\" not found"), "{err}");

    let sources = Sources {
        config_maps: BTreeMap::from([("tpl".to_owned(), strings(&[("a", "x")]))]),
        ..Sources::default()
    };
    let t = template("templateFrom:\n- configMap: {name: tpl, items: [{key: b}]}");
    let err = run(Some(&t), &[], &sources).unwrap_err();
    assert_eq!(
        err.field,
        "spec.target.template.templateFrom[0].configMap.items[0].key"
    );
    assert_eq!(err.message, "error in configmap tpl: missing key b");
}

#[test]
fn errors_name_the_key_line_and_column_and_never_the_data() {
    let t = template("data: {dsn: \"ok\\n{{ .nope }}\"}");
    let err = run(Some(&t), &[("user", b"s3cr3t")], &Sources::default()).unwrap_err();
    assert_eq!(err.field, "spec.target.template.data[dsn]");
    assert!(err.message.contains("dsn:2:"), "{err}");
    assert!(
        err.message.contains("map has no entry for key \"nope\""),
        "{err}"
    );
    assert!(!err.to_string().contains("s3cr3t"));

    let t = template("data: {dsn: '{{ .user | nosuchfunction }}'}");
    let err = run(Some(&t), &[("user", b"s3cr3t")], &Sources::default()).unwrap_err();
    assert!(
        err.message
            .contains("function \"nosuchfunction\" not defined"),
        "{err}"
    );
    assert!(!err.to_string().contains("s3cr3t"));
}

#[test]
fn binary_values_pass_through_byte_for_byte() {
    let p12: &[u8] = &[0x30, 0x82, 0xff, 0x00, 0xfe, 0x41];
    let t = template("data: {keystore: '{{ .p12 }}', encoded: '{{ .p12 | b64enc }}'}");
    let out = run(Some(&t), &[("p12", p12)], &Sources::default()).unwrap();
    assert_eq!(out.data["keystore"], p12);
    assert_eq!(out.data["encoded"], b"MIL/AP5B");
}

#[test]
fn output_is_bounded_by_the_secret_size_limit() {
    let t = template("data: {big: '{{ range $i := until 2000000 }}xx{{ end }}'}");
    let err = run(Some(&t), &[], &Sources::default()).unwrap_err();
    assert_eq!(err.field, "spec.target.template.data[big]");
}

#[test]
fn keys_and_values_must_render_a_map_of_strings() {
    let t = template("templateFrom:\n- literal: '{{ .user }}'");
    let err = run(Some(&t), &[("user", b"just text")], &Sources::default()).unwrap_err();
    assert!(
        err.message.starts_with("could not unmarshal template"),
        "{err}"
    );
    assert!(!err.message.contains("just text"));
}
