//! The checks, in the order they run. Each adds one line (or a few) to the report; none stops the
//! run except a server that cannot be reached at all.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use api::caller_identity::CallerIdentity;
use futures::future::join_all;
use provider_protocol::v1::secret_store_provider_client::SecretStoreProviderClient;
use provider_protocol::{METHODS, SERVICE, rpc_status, v1};
use provider_remote::{Pool, PoolMetrics, Settings, TlsMaterial, Transport};
use tonic::metadata::KeyAndValueRef;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Request, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::names;
use crate::{Options, Outcome, Report};

/// The deadline of the calls that must expire.
const SHORT_DEADLINE: Duration = Duration::from_millis(1);
/// As many as the concurrency check sends: 20 NOT_FOUND answers from our own Fake server all came
/// back within the 1 ms now and then, which left nothing to expire; 100 take it some 10 ms.
const SHORT_DEADLINE_CALLS: usize = 100;
/// Shorter `--read-value`s are neither searched for in messages nor redacted from the report:
/// they would match by chance.
const MIN_SEARCHED_LEN: usize = 4;
/// Calls at once in each round of the GOAWAY check, so that some are in flight when it comes.
const GOAWAY_CALLS: usize = 4;
const GOAWAY_PAUSE: Duration = Duration::from_millis(50);
/// How long the GOAWAY check calls on over the new connection.
const ROUND: Duration = Duration::from_secs(1);
/// A regular expression no back end accepts.
const INVALID_REGEXP: &str = "(";

/// Drives the server `options` name through every check and reports each. Never panics on what
/// the server does; a server that cannot be reached fails `health` and skips the rest.
pub async fn run(options: Options) -> Report {
    let mut report = Report::new(&options.address);
    let metrics = PoolMetrics::default();
    let pool = Pool::new(
        Settings {
            deadline: options.deadline,
            connect_timeout: options.deadline.min(Duration::from_secs(5)),
            ..Settings::default()
        },
        metrics.clone(),
    );
    let connection = match pool.get(&options.address, options.tls.as_ref()) {
        Ok(connection) => connection,
        Err(e) => {
            report.add(
                names::CONNECTION,
                Outcome::Fail,
                format!("the TLS material cannot be used: {e}"),
            );
            return report;
        }
    };
    Session::new(options, connection.transport(), metrics)
        .run(&mut report)
        .await;
    report
}

/// An error status seen during the run, kept for the search for secret values.
struct Seen {
    call: String,
    code: Code,
    /// The message, the details and the trailing metadata's values.
    texts: Vec<Vec<u8>>,
}

struct Session {
    o: Options,
    channel: Transport,
    /// The connections the run opened, as the operator counts them.
    metrics: PoolMetrics,
    /// The random part of the value this run pushes; no message may ever contain it.
    token: String,
    /// The value pushed: a JSON object, which every back end we know accepts without a property.
    secret: Vec<u8>,
    /// A key that does not exist.
    absent: String,
    capabilities: Option<v1::SecretStoreCapabilities>,
    /// A key this run pushed that exists now.
    pushed: Option<String>,
    /// Keys this run may have written, deleted at the end.
    written: Vec<String>,
    errors: Vec<Seen>,
}

fn random_hex() -> String {
    format!("{:016x}", rand::random::<u64>())
}

fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// Whether the server sent this status. One the client made itself (a transport failure, its
/// own deadline) carries the error it came from.
fn from_server(status: &Status) -> bool {
    std::error::Error::source(status).is_none()
}

/// `CODE: message: cause: ...`.
fn describe(status: &Status) -> String {
    let mut text = code_name(status.code()).to_owned();
    if !status.message().is_empty() {
        text.push_str(": ");
        text.push_str(status.message());
    }
    // A transport failure's message is terse and its causes repeat each other: each part once.
    let mut source = std::error::Error::source(status);
    while let Some(cause) = source {
        for part in cause.to_string().split(": ") {
            if !text.contains(part) {
                text.push_str(": ");
                text.push_str(part);
            }
        }
        source = cause.source();
    }
    text
}

/// `1 secret`, `2 secrets`.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

fn is_json_object(value: &[u8]) -> bool {
    matches!(
        serde_json::from_slice::<serde_json::Value>(value),
        Ok(serde_json::Value::Object(_))
    )
}

fn remote_ref(key: &str, property: &str) -> Option<v1::ExternalSecretDataRemoteRef> {
    Some(v1::ExternalSecretDataRemoteRef {
        key: key.into(),
        property: property.into(),
        ..Default::default()
    })
}

fn push_ref(key: &str) -> Option<v1::PushSecretRemoteRef> {
    Some(v1::PushSecretRemoteRef {
        remote_key: key.into(),
        property: String::new(),
    })
}

fn find(regexp: &str) -> Option<v1::ExternalSecretFind> {
    Some(v1::ExternalSecretFind {
        name: Some(v1::FindName {
            regexp: regexp.into(),
        }),
        ..Default::default()
    })
}

fn capability_name(c: v1::SecretStoreCapabilities) -> &'static str {
    c.as_str_name()
}

impl Session {
    fn new(o: Options, channel: Transport, metrics: PoolMetrics) -> Self {
        let token = format!("{}{}", random_hex(), random_hex());
        let secret = serde_json::json!({ "conformance": token })
            .to_string()
            .into_bytes();
        let absent = format!("{}{}", o.remote_key_prefix, random_hex());
        Self {
            o,
            channel,
            metrics,
            token,
            secret,
            absent,
            capabilities: None,
            pushed: None,
            written: Vec::new(),
            errors: Vec::new(),
        }
    }

    async fn run(&mut self, report: &mut Report) {
        if !self.health(report).await {
            report.add(
                names::NOT_RUN,
                Outcome::Skip,
                "not run: the server cannot be reached",
            );
            return;
        }
        self.reflection(report).await;
        self.validate(report).await;
        self.capabilities(report).await;
        self.not_found(report).await;
        self.error_details(report).await;
        self.reads(report).await;
        self.push(report).await;
        self.unknown_provider_ref(report).await;
        self.errors_as_status(report).await;
        self.delete(report).await;
        self.source_namespace(report).await;
        self.client_certificate_required(report).await;
        self.namespace_claims(report).await;
        self.concurrency(report).await;
        self.deadline(report).await;
        self.goaway(report).await;
        self.cleanup(report).await;
        self.no_secret_in_errors(report);
    }

    // -----------------------------------------------------------------------------------------
    // Calls

    fn stub(&self) -> SecretStoreProviderClient<Transport> {
        SecretStoreProviderClient::new(self.channel.clone())
    }

    fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        request.set_timeout(self.o.deadline);
        request
    }

    fn reference(&self) -> Option<v1::ProviderReference> {
        Some(self.o.provider_ref.clone())
    }

    fn ns(&self) -> String {
        self.o.source_namespace.clone()
    }

    fn fresh_key(&self) -> String {
        format!("{}{}", self.o.remote_key_prefix, random_hex())
    }

    fn first_read(&self) -> Option<(String, Vec<u8>)> {
        self.o
            .reads
            .first()
            .map(|r| (r.key.clone(), r.value.clone()))
    }

    /// The read key to ask GetSecretMap for: one whose value is a JSON object if there is one.
    fn map_read(&self) -> Option<crate::Read> {
        self.o
            .reads
            .iter()
            .find(|r| is_json_object(&r.value))
            .or(self.o.reads.first())
            .cloned()
    }

    fn write_only(&self) -> bool {
        self.capabilities == Some(v1::SecretStoreCapabilities::WriteOnly)
    }

    fn record(&mut self, call: &str, status: &Status) {
        let mut texts = vec![
            status.message().as_bytes().to_vec(),
            status.details().to_vec(),
        ];
        for entry in status.metadata().iter() {
            match entry {
                KeyAndValueRef::Ascii(_, value) => texts.push(value.as_encoded_bytes().to_vec()),
                KeyAndValueRef::Binary(_, value) => {
                    if let Ok(bytes) = value.to_bytes() {
                        texts.push(bytes.to_vec());
                    }
                }
            }
        }
        self.errors.push(Seen {
            call: call.to_owned(),
            code: status.code(),
            texts,
        });
    }

    /// The answer, with an error remembered under `call`.
    fn seen<T>(
        &mut self,
        call: &str,
        result: Result<tonic::Response<T>, Status>,
    ) -> Result<T, Status> {
        result
            .map(tonic::Response::into_inner)
            .inspect_err(|status| self.record(call, status))
    }

    /// The values no line of the report may show.
    fn secrets(&self) -> Vec<Vec<u8>> {
        let mut secrets = vec![self.token.as_bytes().to_vec(), self.secret.clone()];
        secrets.extend(
            self.o
                .reads
                .iter()
                .filter(|r| r.value.len() >= MIN_SEARCHED_LEN)
                .map(|r| r.value.clone()),
        );
        secrets
    }

    /// A status for the report, with any secret value it carries blanked out.
    fn say(&self, status: &Status) -> String {
        let mut text = describe(status);
        for secret in self.secrets() {
            if let Ok(secret) = std::str::from_utf8(&secret)
                && !secret.is_empty()
            {
                text = text.replace(secret, "[secret value]");
            }
        }
        text
    }

    async fn get_secret(
        &mut self,
        call: &str,
        reference: Option<v1::ProviderReference>,
        key: &str,
        property: &str,
        namespace: String,
    ) -> Result<Vec<u8>, Status> {
        let answer = self
            .stub()
            .get_secret(self.request(v1::GetSecretRequest {
                remote_ref: remote_ref(key, property),
                provider_ref: reference,
                source_namespace: namespace,
            }))
            .await;
        self.seen(call, answer).map(|a| a.value)
    }

    /// GetSecret of a key that does not exist: the key and the answer.
    async fn get_absent(&mut self) -> (String, Result<Vec<u8>, Status>) {
        let key = self.absent.clone();
        let answer = self
            .get_secret(
                "GetSecret of a missing key",
                self.reference(),
                &key,
                "",
                self.ns(),
            )
            .await;
        (key, answer)
    }

    async fn get_secret_map(
        &mut self,
        call: &str,
        key: &str,
        namespace: String,
    ) -> Result<usize, Status> {
        let answer = self
            .stub()
            .get_secret_map(self.request(v1::GetSecretMapRequest {
                remote_ref: remote_ref(key, ""),
                provider_ref: self.reference(),
                source_namespace: namespace,
            }))
            .await;
        self.seen(call, answer).map(|a| a.secrets.len())
    }

    async fn get_all_secrets(
        &mut self,
        call: &str,
        regexp: &str,
        namespace: String,
    ) -> Result<usize, Status> {
        let answer = self
            .stub()
            .get_all_secrets(self.request(v1::GetAllSecretsRequest {
                provider_ref: self.reference(),
                find: find(regexp),
                source_namespace: namespace,
            }))
            .await;
        self.seen(call, answer).map(|a| a.secrets.len())
    }

    /// Pushes this run's secret value to `key`, as a PushSecret of one Secret key does.
    async fn push_secret(
        &mut self,
        call: &str,
        key: &str,
        namespace: String,
    ) -> Result<(), Status> {
        const SECRET_KEY: &str = "conformance";
        let answer = self
            .stub()
            .push_secret(self.request(v1::PushSecretRequest {
                provider_ref: self.reference(),
                secret_data: [(SECRET_KEY.to_owned(), self.secret.clone())].into(),
                push_secret_data: Some(v1::PushSecretData {
                    metadata: Vec::new(),
                    secret_key: SECRET_KEY.into(),
                    remote_key: key.into(),
                    property: String::new(),
                }),
                source_namespace: namespace,
                secret_type: "Opaque".into(),
                ..Default::default()
            }))
            .await;
        self.seen(call, answer).map(|_| ())
    }

    async fn delete_secret(
        &mut self,
        call: &str,
        key: &str,
        namespace: String,
    ) -> Result<(), Status> {
        let answer = self
            .stub()
            .delete_secret(self.request(v1::DeleteSecretRequest {
                provider_ref: self.reference(),
                remote_ref: push_ref(key),
                source_namespace: namespace,
            }))
            .await;
        self.seen(call, answer).map(|_| ())
    }

    async fn secret_exists(
        &mut self,
        call: &str,
        key: &str,
        namespace: String,
    ) -> Result<bool, Status> {
        let answer = self
            .stub()
            .secret_exists(self.request(v1::SecretExistsRequest {
                provider_ref: self.reference(),
                remote_ref: push_ref(key),
                source_namespace: namespace,
            }))
            .await;
        self.seen(call, answer).map(|a| a.exists)
    }

    // -----------------------------------------------------------------------------------------
    // Checks

    /// Health; false when the server cannot be reached at all.
    async fn health(&mut self, report: &mut Report) -> bool {
        let mut request = Request::new(HealthCheckRequest {
            service: String::new(),
        });
        request.set_timeout(self.o.deadline);
        match HealthClient::new(self.channel.clone()).check(request).await {
            Ok(answer) => {
                let status = answer.into_inner().status();
                if status == ServingStatus::Serving {
                    report.add(names::HEALTH, Outcome::Pass, "SERVING");
                } else {
                    report.add(
                        names::HEALTH,
                        Outcome::Fail,
                        format!("service \"\" is {}", status.as_str_name()),
                    );
                }
                true
            }
            Err(status) if from_server(&status) => {
                self.record("Health/Check", &status);
                report.add(
                    names::HEALTH,
                    Outcome::Fail,
                    format!("grpc.health.v1.Health/Check: {}", self.say(&status)),
                );
                true
            }
            Err(status) => {
                report.add(
                    names::HEALTH,
                    Outcome::Fail,
                    format!("cannot reach {}: {}", self.o.address, describe(&status)),
                );
                false
            }
        }
    }

    async fn reflection(&mut self, report: &mut Report) {
        let (version, services, methods) = match reflect_v1(self.channel.clone(), self.o.deadline)
            .await
        {
            Reflected::Found { services, methods } => ("v1", services, methods),
            Reflected::Failed(why) => {
                report.add(
                    names::REFLECTION,
                    Outcome::Fail,
                    format!("grpc.reflection.v1: {why}"),
                );
                return;
            }
            Reflected::Unimplemented => {
                match reflect_v1alpha(self.channel.clone(), self.o.deadline).await {
                    Reflected::Found { services, methods } => ("v1alpha", services, methods),
                    Reflected::Failed(why) => {
                        report.add(
                            names::REFLECTION,
                            Outcome::Fail,
                            format!("grpc.reflection.v1alpha: {why}"),
                        );
                        return;
                    }
                    Reflected::Unimplemented => {
                        report.add(
                            names::REFLECTION,
                            Outcome::Warn,
                            "no server reflection (grpc.reflection.v1 and v1alpha are UNIMPLEMENTED): a ProviderClass's status.methods stays empty",
                        );
                        return;
                    }
                }
            }
        };
        if !services.iter().any(|s| s == SERVICE) {
            report.add(
                names::REFLECTION,
                Outcome::Fail,
                format!(
                    "reflection lists [{}] but not {SERVICE}",
                    services.join(", ")
                ),
            );
            return;
        }
        let Some(methods) = methods else {
            report.add(
                names::REFLECTION,
                Outcome::Fail,
                format!("reflection lists {SERVICE} but gives no descriptor of it"),
            );
            return;
        };
        let missing: Vec<&str> = METHODS
            .iter()
            .copied()
            .filter(|m| !methods.iter().any(|have| have == m))
            .collect();
        if !missing.is_empty() {
            report.add(
                names::REFLECTION,
                Outcome::Fail,
                format!("{SERVICE} lacks {}", missing.join(", ")),
            );
            return;
        }
        let extra: Vec<&str> = methods
            .iter()
            .map(String::as_str)
            .filter(|m| !METHODS.contains(m))
            .collect();
        let extra = if extra.is_empty() {
            String::new()
        } else {
            format!(" and {}", extra.join(", "))
        };
        if version == "v1alpha" {
            report.add(
                names::REFLECTION,
                Outcome::Warn,
                format!(
                    "{SERVICE} with its {} methods{extra}, but through grpc.reflection.v1alpha only: the operator asks v1, so a ProviderClass's status.methods stays empty",
                    METHODS.len()
                ),
            );
        } else {
            report.add(
                names::REFLECTION,
                Outcome::Pass,
                format!("{SERVICE} with its {} methods{extra}", METHODS.len()),
            );
        }
    }

    async fn validate(&mut self, report: &mut Report) {
        let answer = self
            .stub()
            .validate(self.request(v1::ValidateRequest {
                provider_ref: self.reference(),
                source_namespace: self.ns(),
            }))
            .await;
        let (outcome, detail) = match self.seen("Validate", answer) {
            Ok(a) if a.valid => {
                let mut detail = if a.unknown {
                    "valid (unknown: accepted, the back end was not checked)".to_owned()
                } else {
                    "valid".to_owned()
                };
                if !a.warnings.is_empty() {
                    detail.push_str(&format!("; warnings: {}", a.warnings.join("; ")));
                }
                (Outcome::Pass, detail)
            }
            Ok(a) => (
                Outcome::Fail,
                format!(
                    "invalid: {}",
                    if a.error.is_empty() {
                        "(no error given)"
                    } else {
                        &a.error
                    }
                ),
            ),
            Err(status) => (Outcome::Fail, self.say(&status)),
        };
        report.add(names::VALIDATE, outcome, detail);
    }

    async fn capabilities(&mut self, report: &mut Report) {
        let answer = self
            .stub()
            .capabilities(self.request(v1::CapabilitiesRequest {
                provider_ref: self.reference(),
                source_namespace: self.ns(),
            }))
            .await;
        match self.seen("Capabilities", answer) {
            Ok(a) => match v1::SecretStoreCapabilities::try_from(a.capabilities) {
                Ok(c) => {
                    self.capabilities = Some(c);
                    report.add(names::CAPABILITIES, Outcome::Pass, capability_name(c));
                }
                Err(_) => report.add(
                    names::CAPABILITIES,
                    Outcome::Fail,
                    format!(
                        "unknown value {} (the operator reads it as READ_ONLY)",
                        a.capabilities
                    ),
                ),
            },
            Err(status) => report.add(names::CAPABILITIES, Outcome::Fail, self.say(&status)),
        }
    }

    async fn not_found(&mut self, report: &mut Report) {
        let (key, answer) = self.get_absent().await;
        let (outcome, detail) = match answer {
            Err(s) if s.code() == Code::NotFound => (Outcome::Pass, format!("NOT_FOUND for {key}")),
            Err(s) if s.code() == Code::Unimplemented && self.write_only() => (
                Outcome::Skip,
                "WRITE_ONLY: GetSecret answered UNIMPLEMENTED".to_owned(),
            ),
            Err(s) => (
                Outcome::Fail,
                format!(
                    "GetSecret of {key}, which does not exist: {} (only NOT_FOUND tells the core a secret does not exist)",
                    self.say(&s)
                ),
            ),
            Ok(value) => (
                Outcome::Fail,
                format!(
                    "GetSecret of {key}, which does not exist, answered {} bytes",
                    value.len()
                ),
            ),
        };
        report.add(names::NOT_FOUND, outcome, detail);
    }

    /// The details of a NOT_FOUND (`grpc-status-details-bin`) are what gRPC defines them to be:
    /// grpc-go, which ESO's core uses, reads them as a `google.rpc.Status` and turns a status
    /// whose details do not carry its own code into INTERNAL, so the core never sees NOT_FOUND.
    async fn error_details(&mut self, report: &mut Report) {
        let (key, answer) = self.get_absent().await;
        let status = match answer {
            Err(s) if s.code() == Code::NotFound => s,
            Err(s) if s.code() == Code::Unimplemented && self.write_only() => {
                report.add(
                    names::ERROR_DETAILS,
                    Outcome::Skip,
                    "WRITE_ONLY: GetSecret answered UNIMPLEMENTED",
                );
                return;
            }
            _ => {
                report.add(
                    names::ERROR_DETAILS,
                    Outcome::Skip,
                    format!(
                        "GetSecret of {key} did not answer NOT_FOUND (see {})",
                        names::NOT_FOUND
                    ),
                );
                return;
            }
        };
        if status.details().is_empty() {
            report.add(
                names::ERROR_DETAILS,
                Outcome::Pass,
                "NOT_FOUND without details",
            );
            return;
        }
        let (outcome, detail) = match rpc_status(status.details()) {
            Ok(details) if details.code == Code::NotFound as i32 => {
                let packed: Vec<&str> = details
                    .details
                    .iter()
                    .map(|a| a.type_url.as_str())
                    .collect();
                (
                    Outcome::Pass,
                    if packed.is_empty() {
                        "a google.rpc.Status of code NOT_FOUND".to_owned()
                    } else {
                        format!(
                            "a google.rpc.Status of code NOT_FOUND with {}",
                            packed.join(", ")
                        )
                    },
                )
            }
            Ok(details) => (
                Outcome::Fail,
                format!(
                    "the details of a NOT_FOUND are a google.rpc.Status of code {} ({}), which grpc-go (ESO's core) turns into INTERNAL",
                    details.code,
                    code_name(Code::from_i32(details.code))
                ),
            ),
            Err(e) => (
                Outcome::Fail,
                format!(
                    "the details of a NOT_FOUND are not a google.rpc.Status ({e}), which grpc-go (ESO's core) turns into INTERNAL"
                ),
            ),
        };
        report.add(names::ERROR_DETAILS, outcome, detail);
    }

    async fn reads(&mut self, report: &mut Report) {
        if self.o.reads.is_empty() {
            for name in [names::GET_SECRET_MAP, names::GET_ALL_SECRETS] {
                report.add(name, Outcome::Skip, "no --read-key given");
            }
            return;
        }
        for read in self.o.reads.clone() {
            let answer = self
                .get_secret(
                    "GetSecret of a --read-key",
                    self.reference(),
                    &read.key,
                    "",
                    self.ns(),
                )
                .await;
            let (outcome, detail) = match answer {
                Ok(value) if value == read.value => {
                    (Outcome::Pass, format!("{} bytes, as given", value.len()))
                }
                Ok(value) => (
                    Outcome::Fail,
                    format!(
                        "answered {} bytes that differ from the --read-value ({} bytes)",
                        value.len(),
                        read.value.len()
                    ),
                ),
                Err(s) => (Outcome::Fail, self.say(&s)),
            };
            report.add(names::get_secret(&read.key), outcome, detail);
        }

        let map_read = self.map_read().expect("reads is not empty");
        let a_map = is_json_object(&map_read.value);
        let answer = self
            .get_secret_map("GetSecretMap of a --read-key", &map_read.key, self.ns())
            .await;
        let key = &map_read.key;
        let (outcome, detail) = match answer {
            Ok(n) => (
                Outcome::Pass,
                format!("{} for {key}", count(n, "entry", "entries")),
            ),
            Err(s) if s.code() == Code::Unimplemented => {
                (Outcome::Warn, format!("not supported ({})", self.say(&s)))
            }
            Err(s) if !a_map && s.code() != Code::NotFound && from_server(&s) => (
                Outcome::Warn,
                format!(
                    "{key}: {} (no --read-value is a JSON object, so no map was expected)",
                    self.say(&s)
                ),
            ),
            Err(s) => (Outcome::Fail, format!("{key}: {}", self.say(&s))),
        };
        report.add(names::GET_SECRET_MAP, outcome, detail);

        let regexp = regex::escape(&self.o.reads[0].key);
        let answer = self
            .get_all_secrets(
                "GetAllSecrets by the name of a --read-key",
                &regexp,
                self.ns(),
            )
            .await;
        let (outcome, detail) = match answer {
            Ok(n) => (
                Outcome::Pass,
                format!(
                    "{} for name.regexp {regexp:?}",
                    count(n, "secret", "secrets")
                ),
            ),
            Err(s) if s.code() == Code::Unimplemented => {
                (Outcome::Warn, format!("not supported ({})", self.say(&s)))
            }
            Err(s) => (
                Outcome::Fail,
                format!("name.regexp {regexp:?}: {}", self.say(&s)),
            ),
        };
        report.add(names::GET_ALL_SECRETS, outcome, detail);
    }

    async fn push(&mut self, report: &mut Report) {
        let Some(capabilities) = self.capabilities else {
            for name in [names::PUSH, names::DELETE] {
                report.add(name, Outcome::Skip, "Capabilities did not answer");
            }
            return;
        };
        let key = self.fresh_key();
        let ns = self.ns();
        if capabilities == v1::SecretStoreCapabilities::ReadOnly {
            match self
                .push_secret("PushSecret to a READ_ONLY server", &key, ns)
                .await
            {
                Ok(()) => {
                    self.written.push(key.clone());
                    report.add(
                        names::PUSH,
                        Outcome::Fail,
                        format!("READ_ONLY, but PushSecret of {key} was accepted"),
                    );
                }
                Err(s) => report.add(
                    names::PUSH,
                    Outcome::Pass,
                    format!("READ_ONLY; PushSecret refused ({})", code_name(s.code())),
                ),
            }
            return;
        }
        let claim = capability_name(capabilities);
        match self
            .secret_exists("SecretExists of a fresh key", &key, ns.clone())
            .await
        {
            Ok(false) => {}
            Ok(true) => {
                report.add(
                    names::PUSH,
                    Outcome::Fail,
                    format!("SecretExists answered true for {key}, which this run made up"),
                );
                return;
            }
            Err(s) => {
                report.add(
                    names::PUSH,
                    Outcome::Fail,
                    format!(
                        "SecretExists of {key}, which does not exist: {}",
                        self.say(&s)
                    ),
                );
                return;
            }
        }
        if let Err(s) = self.push_secret("PushSecret", &key, ns.clone()).await {
            report.add(
                names::PUSH,
                Outcome::Fail,
                format!(
                    "{claim}, but PushSecret of a fresh key {key}: {}",
                    self.say(&s)
                ),
            );
            return;
        }
        self.written.push(key.clone());
        let (outcome, detail) = match self
            .secret_exists("SecretExists of the pushed key", &key, ns)
            .await
        {
            Ok(true) => {
                self.pushed = Some(key.clone());
                (
                    Outcome::Pass,
                    format!("{claim}: pushed {key}; SecretExists answered true"),
                )
            }
            Ok(false) => (
                Outcome::Fail,
                format!("pushed {key}, then SecretExists answered false"),
            ),
            Err(s) => (
                Outcome::Fail,
                format!("pushed {key}, then SecretExists: {}", self.say(&s)),
            ),
        };
        report.add(names::PUSH, outcome, detail);
    }

    async fn delete(&mut self, report: &mut Report) {
        let Some(capabilities) = self.capabilities else {
            // `push` has said why.
            return;
        };
        let ns = self.ns();
        if capabilities == v1::SecretStoreCapabilities::ReadOnly {
            let key = self.fresh_key();
            match self
                .delete_secret("DeleteSecret to a READ_ONLY server", &key, ns)
                .await
            {
                Ok(()) => report.add(
                    names::DELETE,
                    Outcome::Fail,
                    format!("READ_ONLY, but DeleteSecret of {key} was accepted"),
                ),
                Err(s) => report.add(
                    names::DELETE,
                    Outcome::Pass,
                    format!("READ_ONLY; DeleteSecret refused ({})", code_name(s.code())),
                ),
            }
            return;
        }
        let Some(key) = self.pushed.take() else {
            report.add(names::DELETE, Outcome::Skip, "nothing was pushed to delete");
            return;
        };
        if let Err(s) = self.delete_secret("DeleteSecret", &key, ns.clone()).await {
            report.add(
                names::DELETE,
                Outcome::Fail,
                format!("DeleteSecret of the pushed {key}: {}", self.say(&s)),
            );
            return;
        }
        let (outcome, detail) = match self
            .secret_exists("SecretExists of the deleted key", &key, ns)
            .await
        {
            Ok(false) => {
                self.written.retain(|k| *k != key);
                (
                    Outcome::Pass,
                    format!("deleted {key}; SecretExists answered false"),
                )
            }
            Ok(true) => (
                Outcome::Fail,
                format!("deleted {key}, then SecretExists answered true"),
            ),
            Err(s) => (
                Outcome::Fail,
                format!("deleted {key}, then SecretExists: {}", self.say(&s)),
            ),
        };
        report.add(names::DELETE, outcome, detail);
    }

    async fn unknown_provider_ref(&mut self, report: &mut Report) {
        let readable_push = self
            .pushed
            .clone()
            .filter(|_| self.capabilities == Some(v1::SecretStoreCapabilities::ReadWrite));
        let (key, exists) = match self.first_read().map(|(k, _)| k).or(readable_push) {
            Some(key) => (key, true),
            None => (self.absent.clone(), false),
        };
        let mut reference = self.o.provider_ref.clone();
        reference.name = format!("conformance-missing-{}", random_hex());
        let name = reference.name.clone();
        let answer = self
            .get_secret(
                "GetSecret naming a missing provider object",
                Some(reference),
                &key,
                "",
                self.ns(),
            )
            .await;
        let (outcome, detail) = match answer {
            Err(s) if s.code() == Code::NotFound && exists => (
                Outcome::Fail,
                format!(
                    "GetSecret of {key} naming provider object {name}, which does not exist, answered NOT_FOUND: the core would take a missing object for a deleted secret"
                ),
            ),
            Err(s) if s.code() == Code::NotFound => (
                Outcome::Warn,
                format!(
                    "GetSecret naming provider object {name}, which does not exist, answered NOT_FOUND; the key does not exist either, so this cannot tell which was meant (give --read-key)"
                ),
            ),
            Err(s) if from_server(&s) => (
                Outcome::Pass,
                format!("{} for provider object {name}", code_name(s.code())),
            ),
            Err(s) => (Outcome::Fail, self.say(&s)),
            Ok(_) => (
                Outcome::Warn,
                format!(
                    "answered a value for provider object {name}, which does not exist: the server ignores provider_ref"
                ),
            ),
        };
        report.add(names::UNKNOWN_PROVIDER_REF, outcome, detail);
    }

    async fn errors_as_status(&mut self, report: &mut Report) {
        let mut problems = Vec::new();
        let mut seen = Vec::new();
        // A provoked error must be a status the server sent.
        fn expect(
            what: &str,
            status: &Status,
            say: String,
            seen: &mut Vec<String>,
            problems: &mut Vec<String>,
        ) {
            if from_server(status) {
                seen.push(format!("{what}: {}", code_name(status.code())));
            } else {
                problems.push(format!("{what}: no status from the server: {say}"));
            }
        }

        let target = self
            .pushed
            .clone()
            .filter(|_| self.capabilities == Some(v1::SecretStoreCapabilities::ReadWrite))
            .or(self.first_read().map(|(k, _)| k))
            .unwrap_or_else(|| self.absent.clone());
        let property = format!("conformance-no-such-property-{}", random_hex());
        let what = "GetSecret with a missing property";
        match self
            .get_secret(what, self.reference(), &target, &property, self.ns())
            .await
        {
            Ok(_) => problems.push(format!(
                "GetSecret of {target} with property {property:?} answered a value"
            )),
            Err(s) => expect(what, &s, self.say(&s), &mut seen, &mut problems),
        }

        let absent = self.absent.clone();
        let what = "GetSecretMap of a missing key";
        match self.get_secret_map(what, &absent, self.ns()).await {
            Ok(n) => problems.push(format!(
                "GetSecretMap of {absent}, which does not exist, answered {n} entries"
            )),
            Err(s) => expect(what, &s, self.say(&s), &mut seen, &mut problems),
        }

        let what = "GetAllSecrets with an invalid name.regexp";
        match self.get_all_secrets(what, INVALID_REGEXP, self.ns()).await {
            Ok(_) => problems.push(format!(
                "GetAllSecrets accepted name.regexp {INVALID_REGEXP:?}"
            )),
            Err(s) if s.code() == Code::NotFound => problems.push(format!(
                "GetAllSecrets with name.regexp {INVALID_REGEXP:?} answered NOT_FOUND, which only means a secret does not exist"
            )),
            Err(s) => expect(what, &s, self.say(&s), &mut seen, &mut problems),
        }

        if problems.is_empty() {
            report.add(names::ERRORS_AS_STATUS, Outcome::Pass, seen.join("; "));
        } else {
            report.add(names::ERRORS_AS_STATUS, Outcome::Fail, problems.join("; "));
        }
    }

    async fn source_namespace(&mut self, report: &mut Report) {
        // A server that cannot do a call at all (by its capabilities) may refuse it for that
        // reason first.
        let reads_refused = self.write_only();
        let writes_refused = self.capabilities == Some(v1::SecretStoreCapabilities::ReadOnly);
        let key = self
            .first_read()
            .map(|(k, _)| k)
            .unwrap_or_else(|| self.absent.clone());
        let map_key = self
            .map_read()
            .map(|r| r.key)
            .unwrap_or_else(|| self.absent.clone());
        let fresh = self.fresh_key();
        let none = String::new;
        let what = |m: &str| format!("{m} with an empty source_namespace");
        let results = [
            (
                "GetSecret",
                reads_refused,
                self.get_secret(&what("GetSecret"), self.reference(), &key, "", none())
                    .await
                    .map(|_| ()),
            ),
            (
                "GetSecretMap",
                reads_refused,
                self.get_secret_map(&what("GetSecretMap"), &map_key, none())
                    .await
                    .map(|_| ()),
            ),
            (
                "GetAllSecrets",
                reads_refused,
                self.get_all_secrets(&what("GetAllSecrets"), &regex::escape(&key), none())
                    .await
                    .map(|_| ()),
            ),
            (
                "PushSecret",
                writes_refused,
                self.push_secret(&what("PushSecret"), &fresh, none()).await,
            ),
            (
                "DeleteSecret",
                writes_refused,
                self.delete_secret(&what("DeleteSecret"), &fresh, none())
                    .await,
            ),
            (
                "SecretExists",
                false,
                self.secret_exists(&what("SecretExists"), &fresh, none())
                    .await
                    .map(|_| ()),
            ),
        ];
        let mut problems = Vec::new();
        for (method, lenient, result) in results {
            match result {
                Err(s) if s.code() == Code::InvalidArgument => {}
                // A server without the method cannot look at anything else.
                Err(s) if (lenient || s.code() == Code::Unimplemented) && from_server(&s) => {}
                Err(s) => problems.push(format!("{method}: {}", self.say(&s))),
                Ok(()) => {
                    if method == "PushSecret" {
                        self.written.push(fresh.clone());
                    }
                    problems.push(format!("{method} answered"));
                }
            }
        }
        if problems.is_empty() {
            report.add(
                names::SOURCE_NAMESPACE,
                Outcome::Pass,
                "INVALID_ARGUMENT from every data call",
            );
        } else {
            report.add(
                names::SOURCE_NAMESPACE,
                Outcome::Fail,
                format!(
                    "an empty source_namespace was not refused with INVALID_ARGUMENT: {}",
                    problems.join("; ")
                ),
            );
        }
    }

    /// A GetSecret of an absent key over a new connection that trusts the server's CA but
    /// offers no client certificate.
    /// GetSecret of the absent key over a connection of tonic's own (not the pool's), with
    /// `identity` as the client certificate or none.
    async fn direct_call(&self, ca: &[u8], identity: Option<&TlsMaterial>) -> Result<(), Status> {
        let host = self
            .o
            .address
            .rsplit_once(':')
            .map_or(self.o.address.as_str(), |(host, _)| host);
        // An IPv6 address is written in brackets before its port; the name it is checked as
        // has none.
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(ca))
            .domain_name(host);
        if let Some(identity) = identity {
            tls = tls.identity(Identity::from_pem(&identity.cert, &identity.key));
        }
        let transport = |e: tonic::transport::Error| Status::from_error(Box::new(e));
        let channel = Endpoint::from_shared(format!("https://{}", self.o.address))
            .map_err(transport)?
            .connect_timeout(self.o.deadline)
            .timeout(self.o.deadline)
            .tls_config(tls)
            .map_err(transport)?
            .connect()
            .await
            .map_err(transport)?;
        SecretStoreProviderClient::new(channel)
            .get_secret(self.request(v1::GetSecretRequest {
                remote_ref: remote_ref(&self.absent, ""),
                provider_ref: self.reference(),
                source_namespace: self.ns(),
            }))
            .await
            .map(drop)
    }

    async fn client_certificate_required(&mut self, report: &mut Report) {
        let Some(tls) = self.o.tls.clone() else {
            report.add(
                names::CLIENT_CERTIFICATE_REQUIRED,
                Outcome::Skip,
                "the server speaks plaintext",
            );
            return;
        };
        // The same call with the certificate first: a failure without it proves something only
        // where the server answers with it over the same kind of connection (it was down, or
        // slow, or the address could not be dialled so, and any call would have failed).
        if let Err(s) = self.direct_call(&tls.ca, Some(&tls)).await
            && !from_server(&s)
        {
            report.add(
                names::CLIENT_CERTIFICATE_REQUIRED,
                Outcome::Fail,
                format!(
                    "not checked: the same call with the client certificate got no answer either: {}",
                    describe(&s)
                ),
            );
            return;
        }
        let served = |answer: String| {
            (
                Outcome::Fail,
                format!("a caller without a client certificate was served: {answer}"),
            )
        };
        let (outcome, detail) = match self.direct_call(&tls.ca, None).await {
            Ok(()) => served("answered".to_owned()),
            // Refused by the handshake: the status is the client's own, carrying the TLS error.
            Err(s) if !from_server(&s) => (Outcome::Pass, format!("refused: {}", describe(&s))),
            Err(s) if matches!(s.code(), Code::Unauthenticated | Code::PermissionDenied) => {
                (Outcome::Pass, format!("refused: {}", self.say(&s)))
            }
            Err(s) => served(self.say(&s)),
        };
        report.add(names::CLIENT_CERTIFICATE_REQUIRED, outcome, detail);
    }

    async fn namespace_claims(&mut self, report: &mut Report) {
        let skip = |report: &mut Report, why: &str| {
            report.add(names::NAMESPACE_CLAIMS, Outcome::Skip, why);
        };
        let Some(tls) = &self.o.tls else {
            return skip(report, "the server speaks plaintext");
        };
        let own = match CallerIdentity::of_pem_chain(&tls.cert) {
            Ok(CallerIdentity::Namespace(own)) => own,
            Ok(CallerIdentity::Cluster) => {
                return skip(
                    report,
                    "the client certificate names no namespace (the operator's, which may claim anything); run with a namespaced ProviderClass's Secret to check",
                );
            }
            Err(e) => {
                report.add(names::NAMESPACE_CLAIMS, Outcome::Fail, e);
                return;
            }
        };
        let other = if own == "conformance-other" {
            "conformance-another"
        } else {
            "conformance-other"
        };
        let claims = [
            ("ClusterSecretStore", own.as_str(), own.as_str()),
            ("ClusterSecretStore", other, other),
            ("SecretStore", other, other),
            ("SecretStore", own.as_str(), other),
        ];
        let mut problems = Vec::new();
        for (kind, source, provider) in claims {
            let reference = v1::ProviderReference {
                store_ref_kind: kind.into(),
                namespace: provider.into(),
                ..self.o.provider_ref.clone()
            };
            let claim = format!(
                "as {kind} with source_namespace {source:?} and provider_ref.namespace {provider:?}"
            );
            let call = format!("GetSecret {claim}");
            let absent = self.absent.clone();
            let read = self
                .get_secret(
                    &call,
                    Some(reference.clone()),
                    &absent,
                    "",
                    source.to_owned(),
                )
                .await
                .map(drop);
            // Validate too: a server that checks claims on its data calls only would tell a
            // tenant whether another namespace's store works.
            let call = format!("Validate {claim}");
            let answer = self
                .stub()
                .validate(self.request(v1::ValidateRequest {
                    provider_ref: Some(reference),
                    source_namespace: source.to_owned(),
                }))
                .await;
            let validated = self.seen(&call, answer).map(drop);
            for (method, result) in [("GetSecret", read), ("Validate", validated)] {
                match result {
                    Err(s) if s.code() == Code::PermissionDenied && from_server(&s) => {}
                    Err(s) => problems.push(format!("{method} {claim}: {}", self.say(&s))),
                    Ok(()) => problems.push(format!("{method} {claim}: answered")),
                }
            }
        }
        if problems.is_empty() {
            report.add(
                names::NAMESPACE_CLAIMS,
                Outcome::Pass,
                format!(
                    "PERMISSION_DENIED for {} outside namespace {own:?}, to GetSecret and Validate",
                    count(claims.len(), "claim", "claims")
                ),
            );
        } else {
            report.add(
                names::NAMESPACE_CLAIMS,
                Outcome::Fail,
                format!(
                    "a certificate of namespace {own:?} was not refused with PERMISSION_DENIED: {}",
                    problems.join("; ")
                ),
            );
        }
    }

    async fn concurrency(&mut self, report: &mut Report) {
        let (key, expected) = match self.first_read() {
            Some((key, value)) => (key, Some(value)),
            None => (self.absent.clone(), None),
        };
        let n = self.o.concurrency;
        let message = v1::GetSecretRequest {
            remote_ref: remote_ref(&key, ""),
            provider_ref: self.reference(),
            source_namespace: self.ns(),
        };
        let started = Instant::now();
        let calls = (0..n).map(|_| {
            let mut stub = self.stub();
            let request = self.request(message.clone());
            async move { stub.get_secret(request).await.map(|a| a.into_inner().value) }
        });
        let results = join_all(calls).await;
        let elapsed = started.elapsed();
        let (mut ok, mut wrong, mut unanswered) = (0, 0, 0);
        let mut codes: BTreeMap<&str, usize> = BTreeMap::new();
        let mut why = None;
        for result in results {
            match result {
                Ok(value) if expected.as_ref().is_some_and(|e| *e != value) => wrong += 1,
                Ok(_) => ok += 1,
                Err(s) if from_server(&s) => {
                    *codes.entry(code_name(s.code())).or_default() += 1;
                    self.record("GetSecret, many at once", &s);
                }
                Err(s) => {
                    unanswered += 1;
                    why.get_or_insert_with(|| self.say(&s));
                }
            }
        }
        let mut answers = vec![format!("{ok} OK")];
        answers.extend(codes.iter().map(|(code, n)| format!("{n} {code}")));
        let (outcome, detail) = if unanswered > 0 {
            (
                Outcome::Fail,
                format!(
                    "{unanswered} of {n} GetSecret calls at once got no answer within {:?}: {}",
                    self.o.deadline,
                    why.unwrap_or_default()
                ),
            )
        } else if wrong > 0 {
            (
                Outcome::Fail,
                format!("{wrong} of {n} answers for {key} differ from its --read-value"),
            )
        } else {
            (
                Outcome::Pass,
                format!(
                    "{n} GetSecret calls at once answered in {:.2} s ({})",
                    elapsed.as_secs_f64(),
                    answers.join(", ")
                ),
            )
        };
        report.add(names::CONCURRENCY, outcome, detail);
    }

    async fn deadline(&mut self, report: &mut Report) {
        let key = self
            .first_read()
            .map(|(k, _)| k)
            .unwrap_or_else(|| self.absent.clone());
        let message = v1::GetSecretRequest {
            remote_ref: remote_ref(&key, ""),
            provider_ref: self.reference(),
            source_namespace: self.ns(),
        };
        // At once, so that a fast server cannot answer them all within the deadline.
        let outer = self.o.deadline;
        let calls = (0..SHORT_DEADLINE_CALLS).map(|_| {
            let mut request = Request::new(message.clone());
            request.set_timeout(SHORT_DEADLINE);
            let mut stub = self.stub();
            async move { tokio::time::timeout(outer, stub.get_secret(request)).await }
        });
        let mut problems = Vec::new();
        let (mut expired, mut hung) = (0, 0);
        for result in join_all(calls).await {
            match result {
                Err(_) => hung += 1,
                Ok(Err(s)) if matches!(s.code(), Code::DeadlineExceeded | Code::Cancelled) => {
                    expired += 1;
                }
                Ok(Err(s)) if from_server(&s) => self.record("GetSecret with a short deadline", &s),
                Ok(Err(s)) => problems.push(self.say(&s)),
                Ok(Ok(_)) => {}
            }
        }
        if hung > 0 {
            problems.insert(
                0,
                format!(
                    "{hung} of {SHORT_DEADLINE_CALLS} calls with a {SHORT_DEADLINE:?} deadline were still open after {outer:?}"
                ),
            );
        }
        problems.dedup();
        let after = self
            .get_secret(
                "GetSecret after short deadlines",
                self.reference(),
                &key,
                "",
                self.ns(),
            )
            .await;
        if let Err(s) = after
            && !from_server(&s)
        {
            problems.push(format!(
                "after the calls with a short deadline the server did not answer: {}",
                self.say(&s)
            ));
        }
        let (outcome, detail) = if !problems.is_empty() {
            (Outcome::Fail, problems.join("; "))
        } else if expired == 0 {
            (
                Outcome::Warn,
                format!(
                    "each of {SHORT_DEADLINE_CALLS} calls at once with a {SHORT_DEADLINE:?} deadline was answered in time, so none expired"
                ),
            )
        } else {
            (
                Outcome::Pass,
                format!(
                    "{expired} of {SHORT_DEADLINE_CALLS} calls at once with a {SHORT_DEADLINE:?} deadline ended DEADLINE_EXCEEDED or CANCELLED, none hung; the server answered the next call"
                ),
            )
        };
        report.add(names::DEADLINE, outcome, detail);
    }

    /// Calls on, a few at a time, until the server has ended the run's connection at its
    /// maximum age and a round more has gone over the new one (or twice the age has passed):
    /// a server that closes without GOAWAY, or before its calls finish, fails calls on the way.
    async fn goaway(&mut self, report: &mut Report) {
        let Some(age) = self.o.max_connection_age else {
            report.add(
                names::GOAWAY,
                Outcome::Skip,
                "no --max-connection-age given (the server's setting)",
            );
            return;
        };
        let (key, expected) = match self.first_read() {
            Some((key, value)) => (key, Some(value)),
            None => (self.absent.clone(), None),
        };
        let message = v1::GetSecretRequest {
            remote_ref: remote_ref(&key, ""),
            provider_ref: self.reference(),
            source_namespace: self.ns(),
        };
        let opened = || self.metrics.opened(&self.o.address);
        let before = opened();
        let started = Instant::now();
        // gRPC servers put up to 10 % of jitter on the age, and the grace period after it.
        let give_up = started + 2 * age + Duration::from_secs(2);
        let (mut answered, mut failures) = (0_usize, Vec::new());
        let mut moved_at = None;
        while Instant::now() < give_up && moved_at.is_none_or(|at: Instant| at.elapsed() < ROUND) {
            let calls = (0..GOAWAY_CALLS).map(|_| {
                let mut stub = self.stub();
                let request = self.request(message.clone());
                async move { stub.get_secret(request).await.map(|a| a.into_inner().value) }
            });
            for result in join_all(calls).await {
                match result {
                    Ok(value) if expected.as_ref().is_none_or(|e| *e == value) => answered += 1,
                    Ok(_) => {
                        failures.push(format!("an answer for {key} differs from its --read-value"))
                    }
                    Err(s)
                        if expected.is_none() && s.code() == Code::NotFound && from_server(&s) =>
                    {
                        answered += 1;
                    }
                    Err(s) => failures.push(self.say(&s)),
                }
            }
            if moved_at.is_none() && opened() > before {
                moved_at = Some(Instant::now());
            }
            tokio::time::sleep(GOAWAY_PAUSE).await;
        }
        failures.dedup();
        let (outcome, detail) = match (moved_at, failures.is_empty()) {
            (_, false) => (
                Outcome::Fail,
                format!(
                    "{} of {} calls failed while the connection aged: {}",
                    failures.len(),
                    failures.len() + answered,
                    failures.join("; ")
                ),
            ),
            (None, true) => (
                Outcome::Fail,
                format!(
                    "the server kept the connection for {:.1} s, twice its --max-connection-age {age:?} ({answered} calls answered)",
                    started.elapsed().as_secs_f64()
                ),
            ),
            (Some(at), true) => (
                Outcome::Pass,
                format!(
                    "the server ended the connection (--max-connection-age {age:?}, from its start) {:.1} s into the check; {answered} calls answered over it and the next, none failed",
                    (at - started).as_secs_f64()
                ),
            ),
        };
        report.add(names::GOAWAY, outcome, detail);
    }

    /// Deletes whatever this run wrote and did not delete yet; reported only when that fails.
    async fn cleanup(&mut self, report: &mut Report) {
        let mut left = Vec::new();
        for key in std::mem::take(&mut self.written) {
            if let Err(s) = self
                .delete_secret("DeleteSecret (cleanup)", &key, self.ns())
                .await
            {
                left.push(format!("{key}: {}", self.say(&s)));
            }
        }
        if !left.is_empty() {
            report.add(
                names::CLEANUP,
                Outcome::Warn,
                format!("could not delete what this run wrote: {}", left.join("; ")),
            );
        }
    }

    fn no_secret_in_errors(&self, report: &mut Report) {
        let mut needles = vec![(
            self.token.as_bytes().to_vec(),
            "the value this run pushed".to_owned(),
        )];
        let mut short = Vec::new();
        for read in &self.o.reads {
            if read.value.len() >= MIN_SEARCHED_LEN {
                needles.push((
                    read.value.clone(),
                    format!("the --read-value of {}", read.key),
                ));
            } else {
                short.push(read.key.as_str());
            }
        }
        let mut leaks: Vec<String> = Vec::new();
        for seen in &self.errors {
            for (needle, what) in &needles {
                if seen.texts.iter().any(|t| contains(t, needle)) {
                    let leak = format!("{} ({}) carries {what}", seen.call, code_name(seen.code));
                    if !leaks.contains(&leak) {
                        leaks.push(leak);
                    }
                }
            }
        }
        let short = if short.is_empty() {
            String::new()
        } else {
            format!(
                "; not searched for (shorter than {MIN_SEARCHED_LEN} bytes): the values of {}",
                short.join(", ")
            )
        };
        if leaks.is_empty() {
            report.add(
                names::NO_SECRET_IN_ERRORS,
                Outcome::Pass,
                format!(
                    "{} carry none of {}{short}",
                    count(self.errors.len(), "error status", "error statuses"),
                    count(needles.len(), "secret value", "secret values")
                ),
            );
        } else {
            report.add(names::NO_SECRET_IN_ERRORS, Outcome::Fail, leaks.join("; "));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reflection, both versions (ESO's Go servers register both; some servers only v1alpha)

enum Reflected {
    Unimplemented,
    Failed(String),
    Found {
        services: Vec<String>,
        /// The methods of `provider.v1.SecretStoreProvider`, when its descriptor came back.
        methods: Option<Vec<String>>,
    },
}

macro_rules! reflect {
    ($name:ident, $($pb:ident)::+) => {
        /// Lists the services, then asks for the file that defines ours, on one stream.
        async fn $name(channel: Transport, deadline: Duration) -> Reflected {
            use $($pb)::+ as pb;
            use pb::server_reflection_client::ServerReflectionClient;
            use pb::server_reflection_request::MessageRequest;
            use pb::server_reflection_response::MessageResponse;

            let ask = |message| pb::ServerReflectionRequest {
                host: String::new(),
                message_request: Some(message),
            };
            let mut call = Request::new(tokio_stream::iter(vec![
                ask(MessageRequest::ListServices(String::new())),
                ask(MessageRequest::FileContainingSymbol(SERVICE.into())),
            ]));
            call.set_timeout(deadline);
            let unimplemented = |s: &Status| s.code() == Code::Unimplemented && from_server(s);
            let mut answers = match ServerReflectionClient::new(channel)
                .server_reflection_info(call)
                .await
            {
                Ok(answers) => answers.into_inner(),
                Err(s) if unimplemented(&s) => return Reflected::Unimplemented,
                Err(s) => return Reflected::Failed(describe(&s)),
            };
            let (mut services, mut methods) = (None, None);
            for _ in 0..2 {
                match answers.message().await {
                    Ok(Some(answer)) => match answer.message_response {
                        Some(MessageResponse::ListServicesResponse(list)) => {
                            services = Some(list.service.into_iter().map(|s| s.name).collect());
                        }
                        Some(MessageResponse::FileDescriptorResponse(files)) => {
                            methods = provider_remote::service_methods(&files.file_descriptor_proto);
                        }
                        _ => {}
                    },
                    Ok(None) => break,
                    Err(s) if unimplemented(&s) => return Reflected::Unimplemented,
                    Err(s) => return Reflected::Failed(describe(&s)),
                }
            }
            match services {
                Some(services) => Reflected::Found { services, methods },
                None => Reflected::Failed("no list of services came back".into()),
            }
        }
    };
}

reflect!(reflect_v1, tonic_reflection::pb::v1);
reflect!(reflect_v1alpha, tonic_reflection::pb::v1alpha);
