//! `crds/` is generated from the types; this fails when someone changed a type and did not run
//! `cargo run -- crds --out crds`, or edited a file there by hand.

use std::collections::BTreeMap;
use std::path::Path;

#[test]
fn committed_crds_match_the_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crds");
    let generated: BTreeMap<String, String> = external_secrets_api::crds::files()
        .unwrap()
        .into_iter()
        .collect();
    let mut committed = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            committed.insert(name, std::fs::read_to_string(&path).unwrap());
        }
    }
    let stale: Vec<_> = generated
        .iter()
        .filter(|(name, yaml)| committed.get(*name) != Some(*yaml))
        .map(|(name, _)| name.clone())
        .chain(
            committed
                .keys()
                .filter(|n| !generated.contains_key(*n))
                .cloned(),
        )
        .collect();
    assert!(
        stale.is_empty(),
        "crds/ is stale ({stale:?}); regenerate with: rm crds/*.yaml && cargo run -- crds --out crds"
    );
}
