//! Golden ConversionReviews: each `tests/golden/<case>.request.json` is answered by
//! [`review`] with the test Widget converter and compared with `<case>.response.json`.
//! `UPDATE_GOLDEN=1 cargo test -p external-secrets-conversion-webhook --test golden` rewrites
//! the responses; review the diff.

mod support;

use std::path::Path;

use external_secrets_conversion_webhook::review;
use serde_json::Value;

#[test]
fn golden_reviews() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let converters = support::Widgets {
        crd: "widgets.test.external-secrets.io".into(),
    };
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".request.json"))
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 8,
        "golden cases missing from {}",
        dir.display()
    );
    let mut failed = Vec::new();
    for request in cases {
        let name = request
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace(".request.json", "");
        let response_path = dir.join(format!("{name}.response.json"));
        let body = std::fs::read(&request).unwrap();
        let got: Value = serde_json::from_slice(&review(&body, &converters)).unwrap();
        let pretty = serde_json::to_string_pretty(&got).unwrap() + "\n";
        if update {
            std::fs::write(&response_path, &pretty).unwrap();
            continue;
        }
        let want: Value = match std::fs::read(&response_path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap(),
            Err(e) => {
                failed.push(format!("{name}: {}: {e}", response_path.display()));
                continue;
            }
        };
        if got != want {
            failed.push(format!("{name}: got\n{pretty}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
