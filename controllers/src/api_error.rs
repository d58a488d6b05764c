//! An API server's refusal of a write, as the operator repeats it in conditions, events and logs.
//! The API server quotes the value it refused (`spec.password: Invalid value: "<the value>":
//! ...`), and a value this operator writes may be a secret: what is repeated keeps the API
//! server's words, the field path and the kind of failure, never the value.

/// What stands where the API server quoted a value.
pub const REDACTED: &str = "<redacted>";

/// A `kube::Error` with the values it quoted cut out.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ApiError(String);

impl From<kube::Error> for ApiError {
    fn from(e: kube::Error) -> Self {
        Self(match e {
            // Its message holds every field error; the details' causes repeat them, values too.
            kube::Error::Api(status) if status.message.is_empty() => {
                format!("{} {}", status.code, status.reason)
            }
            kube::Error::Api(status) => redact(&status.message),
            other => other.to_string(),
        })
    }
}

/// apimachinery's field error types that print the refused value after them.
const VALUED: [&str; 4] = [
    "Invalid value: ",
    "Unsupported value: ",
    "Duplicate value: ",
    "Not found: ",
];

/// `message` with every value it quotes replaced by [`REDACTED`].
pub fn redact(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut quoted = Vec::new();
    let mut rest = message;
    while let Some(start) = VALUED
        .iter()
        .filter_map(|m| rest.find(m).map(|at| at + m.len()))
        .min()
    {
        let len = value_len(&rest[start..]);
        let value = &rest[start..start + len];
        if value.starts_with('"') {
            quoted.push(value);
        }
        out.push_str(&rest[..start]);
        out.push_str(REDACTED);
        rest = &rest[start + len..];
    }
    out.push_str(rest);
    // A detail may quote the value again: the schema's type check does.
    for value in quoted {
        out = out.replace(value, REDACTED);
    }
    out
}

/// The length of the value at the start of `s` as apimachinery prints it: a Go-quoted string,
/// or a number, bool or Go struct that ends before the detail (`: `), the next error (`, `) or
/// the end of an error list (`]`).
fn value_len(s: &str) -> usize {
    let bytes = s.as_bytes();
    let (mut depth, mut in_string, mut i) = (0usize, false, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_string => i += 1,
            b'"' if in_string => {
                in_string = false;
                if i > 0 && depth == 0 && bytes[0] == b'"' {
                    return i + 1;
                }
            }
            _ if in_string => {}
            b'"' => in_string = true,
            b'{' | b'[' | b'(' => depth += 1,
            b'}' | b']' | b')' if depth == 0 => return i,
            b'}' | b']' | b')' => depth -= 1,
            b':' | b',' if depth == 0 && bytes.get(i + 1) == Some(&b' ') => return i,
            _ => {}
        }
        i += 1;
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages as kube-apiserver words them (apimachinery's `field.Error`, the CRD schema
    /// validator's details), each quoting the value `s3cret`.
    #[test]
    fn values_are_cut_and_the_field_and_failure_kept() {
        let cases = [
            (
                r#"ConfigMap "app" is invalid: data[bad key]: Invalid value: "bad key": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"#,
                r#"ConfigMap "app" is invalid: data[bad key]: Invalid value: <redacted>: a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"#,
            ),
            (
                r#"AppConfig.config.example.com "app" is invalid: spec.password: Invalid value: "s3cret": spec.password in body should match '^[0-9]+$'"#,
                r#"AppConfig.config.example.com "app" is invalid: spec.password: Invalid value: <redacted>: spec.password in body should match '^[0-9]+$'"#,
            ),
            // The value twice: the schema's type check quotes it in its detail too.
            (
                r#"AppConfig.config.example.com "app" is invalid: spec.replicas: Invalid value: "s3cret": spec.replicas in body must be of type integer: "s3cret""#,
                r#"AppConfig.config.example.com "app" is invalid: spec.replicas: Invalid value: <redacted>: spec.replicas in body must be of type integer: <redacted>"#,
            ),
            // The schema's own values stay.
            (
                r#"AppConfig.config.example.com "app" is invalid: spec.level: Unsupported value: "s3cret": supported values: "debug", "info""#,
                r#"AppConfig.config.example.com "app" is invalid: spec.level: Unsupported value: <redacted>: supported values: "debug", "info""#,
            ),
            // Several errors, a quote escaped inside the value, a number and a Go map.
            (
                r#"AppConfig.config.example.com "app" is invalid: [spec.a: Invalid value: "s3\"cret: x, y": spec.a in body should match '^x$', spec.pin: Invalid value: 1234: spec.pin in body should be less than or equal to 10, spec.m: Invalid value: map[string]interface {}{"k":"s3cret"}: must be a string, metadata.name: Required value]"#,
                r#"AppConfig.config.example.com "app" is invalid: [spec.a: Invalid value: <redacted>: spec.a in body should match '^x$', spec.pin: Invalid value: <redacted>: spec.pin in body should be less than or equal to 10, spec.m: Invalid value: <redacted>: must be a string, metadata.name: Required value]"#,
            ),
            (
                r#"Secret "app" is invalid: metadata.labels: Invalid value: "s3cret!": name part must consist of alphanumeric characters"#,
                r#"Secret "app" is invalid: metadata.labels: Invalid value: <redacted>: name part must consist of alphanumeric characters"#,
            ),
            // Nothing quoted: unchanged.
            (
                r#"secrets "app" is forbidden: User "system:serviceaccount:es:es" cannot patch resource "secrets""#,
                r#"secrets "app" is forbidden: User "system:serviceaccount:es:es" cannot patch resource "secrets""#,
            ),
        ];
        for (message, redacted) in cases {
            assert_eq!(redact(message), redacted);
        }
    }

    #[test]
    fn an_api_error_says_what_the_api_server_said_without_the_value() {
        let status = kube::core::Status::failure(
            r#"AppConfig.config.example.com "app" is invalid: spec.password: Invalid value: "s3cret": spec.password in body should match '^[0-9]+$'"#,
            "Invalid",
        )
        .with_code(422)
        .with_details(kube::core::response::StatusDetails {
            name: "app".into(),
            group: "config.example.com".into(),
            kind: "AppConfig".into(),
            uid: String::new(),
            causes: vec![kube::core::response::StatusCause {
                reason: "FieldValueInvalid".into(),
                message: r#"Invalid value: "s3cret": spec.password in body should match '^[0-9]+$'"#
                    .into(),
                field: "spec.password".into(),
            }],
            retry_after_seconds: 0,
        });
        let error = ApiError::from(kube::Error::Api(status.boxed()));
        assert_eq!(
            format!("{error} {error:?}").matches("s3cret").count(),
            0,
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            r#"AppConfig.config.example.com "app" is invalid: spec.password: Invalid value: <redacted>: spec.password in body should match '^[0-9]+$'"#
        );
    }
}
