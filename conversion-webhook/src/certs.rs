//! Certificates kept in one Secret that every replica reads: the webhook's, so that the CA
//! bundle injected into the CRDs is the same whichever replica answers, and a provider server's
//! mutual TLS (ESO's layout, [`crate::provider_tls`]), whose server reads the Secret's files and
//! whose client, the operator, reads the Secret.
//!
//! Each serving certificate comes with its own CA, made for it. The webhook's CA key is thrown
//! away after signing. A provider server's is kept in its Secret (`ca.key`, ESO's key, which the
//! server does not mount), because the same CA also signs the client certificates: the
//! operator's, issued with it, and one per namespace that has a ProviderClass of that server,
//! issued later ([`Material::namespace_client`], `api::caller_identity`), so that a tenant holds
//! a key that can claim only its own namespace. A rotation runs in two steps so that no peer
//! meets a certificate it does not trust yet:
//!
//! 1. *prepare*: a `next` certificate (and its CA, and with mutual TLS its client certificate) is
//!    added to the Secret, and `ca.crt` becomes the current CA plus the next one; the bundle is
//!    injected into the CRDs, or a provider server reads it from its mounted files;
//! 2. *promote*, once every peer had time to pick the bundle up: `next` becomes the serving
//!    certificate (and `next-client` the client one), `ca.crt` keeps the old CA for the replicas
//!    or servers that still present the old certificates until they read the Secret again.
//!
//! Keys of the Secret: `tls.crt` (serving certificate, then its CA), `tls.key`, `ca.crt` (the
//! bundle to trust), with mutual TLS `client.crt` (client certificate, then its CA),
//! `client.key` and `ca.key`, and during a rotation `next.crt`, `next.key` (and
//! `next-client.crt`, `next-client.key`, `next-ca.key`).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use time::OffsetDateTime;

use crate::{Error, Settings};

const TLS_CRT: &str = "tls.crt";
const TLS_KEY: &str = "tls.key";
pub(crate) const CA_CRT: &str = "ca.crt";
const NEXT_CRT: &str = "next.crt";
const NEXT_KEY: &str = "next.key";
pub(crate) const CLIENT_CRT: &str = "client.crt";
pub(crate) const CLIENT_KEY: &str = "client.key";
const NEXT_CLIENT_CRT: &str = "next-client.crt";
const NEXT_CLIENT_KEY: &str = "next-client.key";
const CA_KEY: &str = "ca.key";
const NEXT_CA_KEY: &str = "next-ca.key";

/// The field manager of the operator's writes to a provider server's TLS Secret (here, with the
/// purposes, rather than in `provider_tls`, which builds on this module).
pub const PROVIDER_TLS_FIELD_MANAGER: &str = "external-secrets-provider-tls";

/// What a Secret of certificates is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// The conversion webhook's serving certificate.
    Webhook,
    /// A provider server's mutual TLS: its serving certificate and the operator's client
    /// certificate, in ESO's layout.
    ProviderServer,
}

/// The common name of the operator's client certificate (ESO's; servers check the chain only).
pub const CLIENT_COMMON_NAME: &str = "external-secrets-controller";

impl Purpose {
    /// The common name of each CA (its issuing time follows it).
    fn ca_name(self) -> &'static str {
        match self {
            Self::Webhook => "external-secrets-webhook-ca",
            Self::ProviderServer => "external-secrets-provider-ca",
        }
    }

    /// Whether the CA's key is kept, to issue namespaces' client certificates with.
    fn keeps_ca_key(self) -> bool {
        self == Self::ProviderServer
    }

    /// The common name of the client certificate, if there is one.
    fn client(self) -> Option<&'static str> {
        match self {
            Self::Webhook => None,
            Self::ProviderServer => Some(CLIENT_COMMON_NAME),
        }
    }

    /// `app.kubernetes.io/component` of a Secret created here.
    fn component(self) -> &'static str {
        match self {
            Self::Webhook => "conversion-webhook",
            Self::ProviderServer => "provider-tls",
        }
    }

    fn field_manager(self) -> &'static str {
        match self {
            Self::Webhook => crate::FIELD_MANAGER,
            Self::ProviderServer => PROVIDER_TLS_FIELD_MANAGER,
        }
    }

    /// How the log names such a Secret.
    fn describe(self) -> &'static str {
        match self {
            Self::Webhook => "the webhook's certificate Secret",
            Self::ProviderServer => "the provider server's TLS Secret",
        }
    }
}

/// One Secret of certificates: where it is and what it must hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub purpose: Purpose,
    pub namespace: String,
    pub secret_name: String,
    /// DNS names and IP addresses the serving certificate is valid for.
    pub hosts: Vec<String>,
    /// Validity of each certificate; it is replaced when less than a third is left.
    pub lifetime: Duration,
}

impl Target {
    pub fn secret_ref(&self) -> String {
        format!("Secret {}/{}", self.namespace, self.secret_name)
    }
}

/// A certificate (a serving one, or with mutual TLS a client one), the CA that issued it, and
/// its key. Its `Debug` leaves the keys out.
#[derive(Clone, PartialEq, Eq)]
pub struct Serving {
    pub cert_der: Vec<u8>,
    pub ca_der: Vec<u8>,
    /// PKCS#8, PEM.
    pub key_pem: String,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    /// DNS names and IP addresses, as written in the certificate.
    pub hosts: Vec<String>,
    /// The CA's key, PKCS#8 PEM, where the CA issues more certificates later.
    pub ca_key_pem: Option<String>,
}

impl std::fmt::Debug for Serving {
    // The keys never reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const REDACTED: &str = "<redacted>";
        f.debug_struct("Serving")
            .field("cert_der", &self.cert_der)
            .field("ca_der", &self.ca_der)
            .field("key_pem", &REDACTED)
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .field("hosts", &self.hosts)
            .field("ca_key_pem", &self.ca_key_pem.as_ref().map(|_| REDACTED))
            .finish()
    }
}

/// What the Secret holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Material {
    pub serving: Serving,
    /// The certificate waiting for its CA to be trusted everywhere.
    pub next: Option<Serving>,
    /// The CAs to trust, DER: the serving certificate's first.
    pub ca_bundle: Vec<Vec<u8>>,
    /// With mutual TLS, the client certificate `serving`'s CA signed...
    pub client: Option<Serving>,
    /// ...and the one `next`'s CA signed.
    pub next_client: Option<Serving>,
}

impl Material {
    /// A first certificate, with nothing to rotate from.
    pub fn fresh(target: &Target, now: SystemTime) -> Result<Self, Error> {
        let (serving, client) = issue_for(target, now)?;
        Ok(Self {
            ca_bundle: vec![serving.ca_der.clone()],
            serving,
            next: None,
            client,
            next_client: None,
        })
    }

    /// Step 1 of a rotation: `next` is issued and its CA joins the bundle, replacing the CA of
    /// the certificate served before the current one.
    pub fn prepare(&self, target: &Target, now: SystemTime) -> Result<Self, Error> {
        let (next, next_client) = issue_for(target, now)?;
        Ok(Self {
            serving: self.serving.clone(),
            ca_bundle: vec![self.serving.ca_der.clone(), next.ca_der.clone()],
            next: Some(next),
            client: self.client.clone(),
            next_client,
        })
    }

    /// Step 2: `next` is served (and `next_client` presented); the CA of the certificate it
    /// replaces stays trusted.
    pub fn promote(&self) -> Option<Self> {
        let next = self.next.clone()?;
        Some(Self {
            ca_bundle: vec![next.ca_der.clone(), self.serving.ca_der.clone()],
            serving: next,
            next: None,
            client: self.next_client.clone().or_else(|| self.client.clone()),
            next_client: None,
        })
    }

    /// The CAs the CRDs must trust for every certificate in use now or about to be.
    pub fn required_cas(&self) -> Vec<&[u8]> {
        let mut cas = vec![self.serving.ca_der.as_slice()];
        cas.extend(self.next.as_ref().map(|n| n.ca_der.as_slice()));
        cas
    }

    /// `ca.crt`: what goes into a CRD's `caBundle`.
    pub fn ca_bundle_pem(&self) -> String {
        self.ca_bundle.iter().map(|der| pem(der)).collect()
    }

    /// Whether the serving certificate should be replaced: less than a third of its lifetime
    /// left (of its own or of the client certificate's), or not valid for the names the
    /// server is reached at.
    pub fn rotation_due(&self, target: &Target, now: SystemTime) -> bool {
        let ending = |s: &Serving| {
            let lifetime = s.not_after.duration_since(s.not_before).unwrap_or_default();
            let left = s.not_after.duration_since(now).unwrap_or_default();
            left < lifetime / 3
        };
        // A Secret written before CA keys were kept cannot issue namespaces' certificates: its
        // CA is replaced by a rotation, in two steps like any other.
        let key_wanted = target.purpose.keeps_ca_key() && self.serving.ca_key_pem.is_none();
        ending(&self.serving)
            || self.client.as_ref().is_some_and(ending)
            || !same_hosts(&self.serving.hosts, &target.hosts)
            || key_wanted
    }

    /// A client certificate naming `namespace` (its URI SAN, `api::caller_identity`), signed by
    /// the serving certificate's CA and valid as long as it: what a namespaced ProviderClass's
    /// TLS Secret holds. `None` when the CA's key is not kept.
    pub fn namespace_client(&self, namespace: &str) -> Result<Option<Serving>, Error> {
        let issue_err = |what: &'static str| move |e: rcgen::Error| Error::Issue(what, e);
        let serving = &self.serving;
        let Some(ca_key) = &serving.ca_key_pem else {
            return Ok(None);
        };
        let ca_key = KeyPair::from_pem(ca_key).map_err(issue_err("the CA's key"))?;
        let ca =
            rcgen::Issuer::from_ca_cert_der(&CertificateDer::from(serving.ca_der.clone()), ca_key)
                .map_err(issue_err("the CA"))?;
        let mut leaf = CertificateParams::default();
        leaf.distinguished_name = name(&format!("{CLIENT_COMMON_NAME}:{namespace}"));
        let uri = api::caller_identity::namespace_uri(namespace)
            .try_into()
            .map_err(issue_err("a subject alternative name"))?;
        leaf.subject_alt_names = vec![SanType::URI(uri)];
        leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        leaf.use_authority_key_identifier_extension = true;
        leaf.not_before = serving.not_before.into();
        leaf.not_after = serving.not_after.into();
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(issue_err("a key"))?;
        let cert = leaf
            .signed_by(&key, &ca)
            .map_err(issue_err("a certificate"))?;
        Ok(Some(Serving {
            cert_der: cert.der().to_vec(),
            ca_der: serving.ca_der.clone(),
            key_pem: key.serialize_pem(),
            not_before: serving.not_before,
            not_after: serving.not_after,
            hosts: Vec::new(),
            ca_key_pem: None,
        }))
    }

    /// Why this cannot serve `target` at all, so that it is replaced rather than rotated: a
    /// client certificate is wanted and missing.
    pub fn unfit_for(&self, target: &Target) -> Option<String> {
        (target.purpose.client().is_some() && self.client.is_none())
            .then(|| format!("{CLIENT_CRT} or {CLIENT_KEY} is missing"))
    }

    pub fn to_secret_data(&self) -> BTreeMap<String, ByteString> {
        let mut data = BTreeMap::new();
        let mut put = |key: &str, value: String| {
            data.insert(key.to_owned(), ByteString(value.into_bytes()));
        };
        put(TLS_CRT, self.serving.chain_pem());
        put(TLS_KEY, self.serving.key_pem.clone());
        put(CA_CRT, self.ca_bundle_pem());
        let optional = [
            (NEXT_CRT, NEXT_KEY, &self.next),
            (CLIENT_CRT, CLIENT_KEY, &self.client),
            (NEXT_CLIENT_CRT, NEXT_CLIENT_KEY, &self.next_client),
        ];
        for (cert_key, key_key, certificate) in optional {
            if let Some(certificate) = certificate {
                put(cert_key, certificate.chain_pem());
                put(key_key, certificate.key_pem.clone());
            }
        }
        let ca_keys = [
            (CA_KEY, Some(&self.serving)),
            (NEXT_CA_KEY, self.next.as_ref()),
        ];
        for (key, certificate) in ca_keys {
            if let Some(ca_key) = certificate.and_then(|c| c.ca_key_pem.clone()) {
                put(key, ca_key);
            }
        }
        data
    }

    /// The client certificate of a Secret's data (`client.crt`, `client.key`), checked.
    pub fn client_of(data: &BTreeMap<String, ByteString>) -> Result<Option<Serving>, String> {
        Serving::decode(data, CLIENT_CRT, CLIENT_KEY)
    }

    /// The Secret's data, checked: every certificate parses, every key matches its certificate.
    pub fn from_secret_data(data: &BTreeMap<String, ByteString>) -> Result<Self, String> {
        let (material, mut bad_ca_keys) = Self::from_secret_data_but_ca_keys(data)?;
        match bad_ca_keys.pop() {
            Some(why) => Err(why),
            None => Ok(material),
        }
    }

    /// As [`Material::from_secret_data`], except that a CA's key (`ca.key`, `next.ca.key`) that
    /// is unreadable or not its CA's is left out rather than failing the whole Secret; why each
    /// was left out comes second. Without its key the CA is kept, and due for rotation.
    pub fn from_secret_data_but_ca_keys(
        data: &BTreeMap<String, ByteString>,
    ) -> Result<(Self, Vec<String>), String> {
        let mut bad_ca_keys = Vec::new();
        let mut serving = Serving::decode(data, TLS_CRT, TLS_KEY)?
            .ok_or_else(|| format!("{TLS_CRT} or {TLS_KEY} is missing"))?;
        if let Err(why) = serving.add_ca_key(data, CA_KEY) {
            bad_ca_keys.push(why);
        }
        let mut next = Serving::decode(data, NEXT_CRT, NEXT_KEY)?;
        if let Some(next) = &mut next
            && let Err(why) = next.add_ca_key(data, NEXT_CA_KEY)
        {
            bad_ca_keys.push(why);
        }
        let client = Serving::decode(data, CLIENT_CRT, CLIENT_KEY)?;
        let next_client = Serving::decode(data, NEXT_CLIENT_CRT, NEXT_CLIENT_KEY)?;
        // A client certificate is signed by the CA of the serving certificate it goes with.
        let pairs = [
            (CLIENT_CRT, &client, TLS_CRT, Some(&serving)),
            (NEXT_CLIENT_CRT, &next_client, NEXT_CRT, next.as_ref()),
        ];
        for (what, client, by, serving) in pairs {
            if let Some(client) = client
                && serving.is_none_or(|s| s.ca_der != client.ca_der)
            {
                return Err(format!("{what} is not signed by the CA of {by}"));
            }
        }
        let ca_bundle = data
            .get(CA_CRT)
            .map(|b| certificates(&b.0))
            .transpose()
            .map_err(|e| format!("{CA_CRT}: {e}"))?
            .unwrap_or_default();
        for (what, ca) in std::iter::once((TLS_CRT, &serving.ca_der))
            .chain(next.as_ref().map(|n| (NEXT_CRT, &n.ca_der)))
        {
            if !ca_bundle.contains(ca) {
                return Err(format!("{CA_CRT} lacks the CA of {what}"));
            }
        }
        let material = Self {
            serving,
            next,
            ca_bundle,
            client,
            next_client,
        };
        Ok((material, bad_ca_keys))
    }
}

impl Serving {
    /// The certificate then its CA, PEM: what `tls.crt` holds and what the server presents.
    pub fn chain_pem(&self) -> String {
        pem(&self.cert_der) + &pem(&self.ca_der)
    }

    /// The rustls form, with the key checked against the certificate.
    pub fn certified_key(&self) -> Result<CertifiedKey, String> {
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())
            .map_err(|e| format!("reading the private key: {e}"))?;
        let chain = vec![
            CertificateDer::from(self.cert_der.clone()),
            CertificateDer::from(self.ca_der.clone()),
        ];
        CertifiedKey::from_der(chain, key, &crate::crypto_provider())
            .map_err(|e| format!("the private key does not fit the certificate: {e}"))
    }

    /// Takes the CA's key of `key_key`, if the Secret holds it; checked against the CA. On an
    /// error nothing is taken.
    fn add_ca_key(
        &mut self,
        data: &BTreeMap<String, ByteString>,
        key_key: &str,
    ) -> Result<(), String> {
        let Some(key) = data.get(key_key) else {
            return Ok(());
        };
        let key_pem =
            String::from_utf8(key.0.clone()).map_err(|_| format!("{key_key} is not PEM text"))?;
        let key = KeyPair::from_pem(&key_pem).map_err(|_| format!("{key_key} holds no key"))?;
        let (_, ca) = x509_parser::parse_x509_certificate(&self.ca_der)
            .map_err(|e| format!("the CA of {key_key}: {e}"))?;
        if ca.public_key().raw != rcgen::PublicKeyData::subject_public_key_info(&key).as_slice() {
            return Err(format!("{key_key} is not the key of its CA"));
        }
        self.ca_key_pem = Some(key_pem);
        Ok(())
    }

    fn decode(
        data: &BTreeMap<String, ByteString>,
        cert_key: &str,
        key_key: &str,
    ) -> Result<Option<Self>, String> {
        let (Some(chain), Some(key)) = (data.get(cert_key), data.get(key_key)) else {
            return Ok(None);
        };
        let mut chain = certificates(&chain.0).map_err(|e| format!("{cert_key}: {e}"))?;
        if chain.len() != 2 {
            return Err(format!(
                "{cert_key} holds {} certificates; expected the serving certificate then its CA",
                chain.len()
            ));
        }
        let ca_der = chain.pop().unwrap_or_default();
        let cert_der = chain.pop().unwrap_or_default();
        let key_pem =
            String::from_utf8(key.0.clone()).map_err(|_| format!("{key_key} is not PEM text"))?;
        let (not_before, not_after, hosts) =
            inspect(&cert_der).map_err(|e| format!("{cert_key}: {e}"))?;
        let serving = Self {
            cert_der,
            ca_der,
            key_pem,
            not_before,
            not_after,
            hosts,
            ca_key_pem: None,
        };
        serving
            .certified_key()
            .map_err(|e| format!("{key_key}: {e}"))?;
        Ok(Some(serving))
    }
}

/// A CA made for `target` and thrown away after signing: the serving certificate for its hosts
/// and, if it wants one, the client certificate, both valid `lifetime` from `now`.
pub fn issue_for(target: &Target, now: SystemTime) -> Result<(Serving, Option<Serving>), Error> {
    let issue_err = |what: &'static str| move |e: rcgen::Error| Error::Issue(what, e);
    let lifetime = target.lifetime;
    let now = OffsetDateTime::from(now);
    // A little slack for peers whose clock is behind ours, but never so much that it counts as
    // a noticeable part of a short (test) lifetime.
    let backdate = (lifetime / 10).min(Duration::from_secs(60));
    let not_before = now - backdate;
    let not_after = now + lifetime;

    let mut ca = CertificateParams::default();
    ca.distinguished_name = name(&format!(
        "{}@{}",
        target.purpose.ca_name(),
        now.unix_timestamp()
    ));
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca.not_before = not_before;
    ca.not_after = not_after;
    let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(issue_err("a CA key"))?;
    let ca = CertifiedIssuer::self_signed(ca, ca_key).map_err(issue_err("the CA"))?;

    let leaf = |common_name: &str, purpose: ExtendedKeyUsagePurpose, hosts: &[String]| {
        let mut leaf = CertificateParams::default();
        leaf.distinguished_name = name(common_name);
        leaf.subject_alt_names = hosts
            .iter()
            .map(|h| match h.parse::<IpAddr>() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => h.as_str().try_into().map(SanType::DnsName),
            })
            .collect::<Result<_, _>>()
            .map_err(issue_err("a subject alternative name"))?;
        leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        leaf.extended_key_usages = vec![purpose];
        leaf.use_authority_key_identifier_extension = true;
        leaf.not_before = not_before;
        leaf.not_after = not_after;
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(issue_err("a key"))?;
        let cert = leaf
            .signed_by(&key, &ca)
            .map_err(issue_err("a certificate"))?;
        Ok::<_, Error>(Serving {
            cert_der: cert.der().to_vec(),
            ca_der: ca.der().to_vec(),
            key_pem: key.serialize_pem(),
            not_before: not_before.into(),
            not_after: not_after.into(),
            hosts: hosts.to_vec(),
            ca_key_pem: None,
        })
    };
    let hosts = &target.hosts;
    let mut serving = leaf(
        hosts.first().map_or("external-secrets-webhook", |h| h),
        ExtendedKeyUsagePurpose::ServerAuth,
        hosts,
    )?;
    if target.purpose.keeps_ca_key() {
        serving.ca_key_pem = Some(ca.key().serialize_pem());
    }
    let client = target
        .purpose
        .client()
        .map(|common_name| leaf(common_name, ExtendedKeyUsagePurpose::ClientAuth, &[]))
        .transpose()?;
    Ok((serving, client))
}

fn name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}

fn same_hosts(a: &[String], b: &[String]) -> bool {
    let mut a = a.to_vec();
    let mut b = b.to_vec();
    a.sort();
    b.sort();
    a == b
}

/// Validity and subject alternative names of a certificate.
fn inspect(der: &[u8]) -> Result<(SystemTime, SystemTime, Vec<String>), String> {
    use x509_parser::extensions::GeneralName;

    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("not an X.509 certificate: {e}"))?;
    let time = |t: i64| UNIX_EPOCH + Duration::from_secs(u64::try_from(t).unwrap_or(0));
    let validity = cert.validity();
    let hosts = cert
        .subject_alternative_name()
        .map_err(|e| format!("subject alternative names: {e}"))?
        .map(|san| {
            san.value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    GeneralName::DNSName(dns) => Some((*dns).to_owned()),
                    GeneralName::IPAddress(ip) => ip_address(ip).map(|ip| ip.to_string()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    Ok((
        time(validity.not_before.timestamp()),
        time(validity.not_after.timestamp()),
        hosts,
    ))
}

fn ip_address(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
        _ => None,
    }
}

/// Every certificate in a PEM text, DER; other PEM sections are skipped.
pub fn certificates(pem_text: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    CertificateDer::pem_slice_iter(pem_text)
        .map(|c| c.map(|c| c.to_vec()).map_err(|e| e.to_string()))
        .collect()
}

fn pem(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// The certificate another issuer (cert-manager) keeps in the Secret: `tls.crt` the serving
/// certificate and any intermediates, `tls.key` its key. Read only: that issuer rotates it and
/// fills the CRDs' CA bundle. With the Secret's resourceVersion, to notice a rotation.
pub async fn load_external(
    api: &Api<Secret>,
    settings: &Settings,
) -> Result<(String, CertifiedKey), Error> {
    let unusable = |why: String| Error::Unusable(settings.secret_ref(), why);
    let secret = api
        .get_opt(&settings.secret_name)
        .await
        .map_err(|e| Error::Kube("reading", settings.secret_ref(), e))?
        .ok_or_else(|| unusable("it does not exist (yet); its issuer writes it".to_owned()))?;
    let data = secret.data.unwrap_or_default();
    let field = |key: &str| {
        data.get(key)
            .map(|b| b.0.as_slice())
            .ok_or_else(|| unusable(format!("it has no {key}")))
    };
    let chain: Vec<CertificateDer<'static>> = certificates(field(TLS_CRT)?)
        .map_err(|e| unusable(format!("{TLS_CRT}: {e}")))?
        .into_iter()
        .map(CertificateDer::from)
        .collect();
    let key = PrivateKeyDer::from_pem_slice(field(TLS_KEY)?)
        .map_err(|e| unusable(format!("{TLS_KEY}: {e}")))?;
    let key = CertifiedKey::from_der(chain, key, &crate::crypto_provider())
        .map_err(|e| unusable(format!("{TLS_KEY} does not fit {TLS_CRT}: {e}")))?;
    Ok((secret.metadata.resource_version.unwrap_or_default(), key))
}

/// The Secret as last read: a replacement names its resourceVersion, so that of two replicas
/// rotating at once only one succeeds.
#[derive(Clone, Debug)]
pub struct Stored {
    pub material: Material,
    secret: Secret,
}

/// How often a start-up retries when the Secret changed under it; each conflict means another
/// replica wrote a usable Secret, so more than a couple are unexpected.
const ATTEMPTS: usize = 5;

/// The Secret's certificates, creating the Secret when there is none (or replacing it when it
/// holds nothing usable). Replicas starting together race on the create; the loser reads the
/// winner's Secret, so all of them serve one certificate.
pub async fn load_or_create(api: &Api<Secret>, target: &Target) -> Result<Stored, Error> {
    for _ in 0..ATTEMPTS {
        let existing = api
            .get_opt(&target.secret_name)
            .await
            .map_err(|e| Error::Kube("reading", target.secret_ref(), e))?;
        let fresh = Material::fresh(target, SystemTime::now())?;
        let written = match existing {
            Some(secret) => match read(&secret, target) {
                Ok(material) => return Ok(Stored { material, secret }),
                // Made empty for this (a Helm chart's placeholder): nothing to warn about.
                Err(_) if secret.data.as_ref().is_none_or(BTreeMap::is_empty) => {
                    replace(api, target, &secret, &fresh).await?
                }
                Err(e) => {
                    tracing::warn!(secret = %target.secret_ref(), error = %e, "{} is unusable; replacing it", target.purpose.describe());
                    replace(api, target, &secret, &fresh).await?
                }
            },
            None => create(api, target, &fresh).await?,
        };
        if let Some(secret) = written {
            tracing::info!(secret = %target.secret_ref(), "issued a CA and certificates into {}", target.purpose.describe());
            return Ok(Stored {
                material: fresh,
                secret,
            });
        }
    }
    Err(Error::Contended(target.secret_ref()))
}

/// The Secret now, or `None` when it is gone or unusable (then [`load_or_create`] repairs it).
pub async fn reload(api: &Api<Secret>, target: &Target) -> Result<Option<Stored>, Error> {
    let secret = api
        .get_opt(&target.secret_name)
        .await
        .map_err(|e| Error::Kube("reading", target.secret_ref(), e))?;
    Ok(secret.and_then(|secret| match read(&secret, target) {
        Ok(material) => Some(Stored { material, secret }),
        Err(e) => {
            tracing::warn!(secret = %target.secret_ref(), error = %e, "{} is unusable", target.purpose.describe());
            None
        }
    }))
}

/// Writes `material` over `stored`; `None` when another replica changed the Secret first.
pub async fn update(
    api: &Api<Secret>,
    target: &Target,
    stored: &Stored,
    material: Material,
) -> Result<Option<Stored>, Error> {
    Ok(replace(api, target, &stored.secret, &material)
        .await?
        .map(|secret| Stored { material, secret }))
}

fn read(secret: &Secret, target: &Target) -> Result<Material, String> {
    let data = secret
        .data
        .as_ref()
        .ok_or_else(|| "it has no data".to_owned())?;
    // A bad CA key alone does not make the Secret unusable: replacing it would bring a fresh CA
    // in one step, which the clients trusting this one refuse. Without its key, the CA is due
    // for rotation, whose two steps bring a new one with its key.
    let (material, bad_ca_keys) = Material::from_secret_data_but_ca_keys(data)?;
    for why in bad_ca_keys {
        tracing::warn!(secret = %target.secret_ref(), error = %why, "{} holds a bad CA key; leaving it out, so the CA is rotated", target.purpose.describe());
    }
    match material.unfit_for(target) {
        Some(why) => Err(why),
        None => Ok(material),
    }
}

async fn create(
    api: &Api<Secret>,
    target: &Target,
    material: &Material,
) -> Result<Option<Secret>, Error> {
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(target.secret_name.clone()),
            namespace: Some(target.namespace.clone()),
            labels: Some(BTreeMap::from([
                (
                    "app.kubernetes.io/managed-by".to_owned(),
                    "external-secrets".to_owned(),
                ),
                (
                    "app.kubernetes.io/component".to_owned(),
                    target.purpose.component().to_owned(),
                ),
            ])),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".to_owned()),
        data: Some(material.to_secret_data()),
        ..Secret::default()
    };
    match api.create(&post_params(target), &secret).await {
        Ok(secret) => Ok(Some(secret)),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
        Err(e) => Err(Error::Kube("creating", target.secret_ref(), e)),
    }
}

async fn replace(
    api: &Api<Secret>,
    target: &Target,
    current: &Secret,
    material: &Material,
) -> Result<Option<Secret>, Error> {
    // Labels, annotations and the type (immutable) stay as whoever created the Secret set them.
    let mut secret = current.clone();
    secret.data = Some(material.to_secret_data());
    secret.string_data = None;
    match api
        .replace(&target.secret_name, &post_params(target), &secret)
        .await
    {
        Ok(secret) => Ok(Some(secret)),
        // 409: changed since read; 404: deleted since read. Either way, read again.
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => Ok(None),
        Err(e) => Err(Error::Kube("replacing", target.secret_ref(), e)),
    }
}

fn post_params(target: &Target) -> PostParams {
    PostParams {
        field_manager: Some(target.purpose.field_manager().to_owned()),
        ..PostParams::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        let mut s = Settings::new("ns");
        s.lifetime = Duration::from_secs(3000);
        s
    }

    #[test]
    fn hosts_name_the_service_and_loopback_only_when_asked() {
        let mut s = settings();
        assert_eq!(
            s.hosts(),
            [
                "external-secrets-webhook.ns.svc",
                "external-secrets-webhook.ns.svc.cluster.local",
                "external-secrets-webhook.ns",
                "external-secrets-webhook",
            ]
        );
        s.loopback = true;
        assert!(
            s.hosts()
                .ends_with(&["localhost".into(), "127.0.0.1".into()])
        );
    }

    #[test]
    fn a_fresh_certificate_survives_the_secret_and_names_its_hosts() {
        let mut s = settings();
        s.loopback = true;
        let now = SystemTime::now();
        let material = Material::fresh(&s.target(), now).unwrap();
        let back = Material::from_secret_data(&material.to_secret_data()).unwrap();
        assert_eq!(back.serving.cert_der, material.serving.cert_der);
        assert_eq!(back.serving.hosts, s.hosts());
        assert_eq!(back.ca_bundle, vec![material.serving.ca_der.clone()]);
        assert!(back.next.is_none());
        // Whole seconds in X.509.
        let secs = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_secs();
        assert_eq!(secs(back.serving.not_after), secs(now + s.lifetime));
        assert_eq!(
            secs(back.serving.not_before),
            secs(now - Duration::from_secs(60))
        );
        back.serving.certified_key().unwrap();
    }

    #[test]
    fn rotation_is_due_in_the_last_third_or_when_the_names_change() {
        let s = settings();
        let now = SystemTime::now();
        let m = Material::fresh(&s.target(), now).unwrap();
        let m = Material::from_secret_data(&m.to_secret_data()).unwrap();
        // Lifetime 3000 s plus 60 s backdated: due with less than 1020 s left.
        assert!(!m.rotation_due(&s.target(), now));
        assert!(!m.rotation_due(&s.target(), now + Duration::from_secs(1970)));
        assert!(m.rotation_due(&s.target(), now + Duration::from_secs(1990)));
        assert!(m.rotation_due(&s.target(), now + Duration::from_secs(4000)));
        let mut other = s.clone();
        other.namespace = "elsewhere".into();
        assert!(m.rotation_due(&other.target(), now));
    }

    #[test]
    fn a_rotation_always_trusts_the_certificate_in_use() {
        let s = settings();
        let now = SystemTime::now();
        let first = Material::fresh(&s.target(), now).unwrap();
        let prepared = first.prepare(&s.target(), now).unwrap();
        assert_eq!(prepared.serving, first.serving);
        let next = prepared.next.clone().unwrap();
        assert_eq!(
            prepared.ca_bundle,
            [first.serving.ca_der.clone(), next.ca_der.clone()]
        );
        assert_eq!(
            prepared.required_cas(),
            [first.serving.ca_der.as_slice(), next.ca_der.as_slice()]
        );
        let back = Material::from_secret_data(&prepared.to_secret_data()).unwrap();
        assert_eq!(
            back.next.as_ref().map(|n| &n.cert_der),
            Some(&next.cert_der)
        );

        let promoted = prepared.promote().unwrap();
        assert_eq!(promoted.serving, next);
        assert!(promoted.next.is_none());
        // The old CA stays for replicas that have not read the Secret again yet...
        assert_eq!(
            promoted.ca_bundle,
            [next.ca_der.clone(), first.serving.ca_der.clone()]
        );
        // ...until the next rotation replaces it.
        let again = promoted.prepare(&s.target(), now).unwrap();
        assert_eq!(again.ca_bundle[0], next.ca_der);
        assert!(!again.ca_bundle.contains(&first.serving.ca_der));
        assert!(first.promote().is_none());
    }

    #[test]
    fn unusable_secret_data_is_named() {
        let s = settings();
        let a = Material::fresh(&s.target(), SystemTime::now()).unwrap();
        let b = Material::fresh(&s.target(), SystemTime::now()).unwrap();
        let data = a.to_secret_data();
        let with = |key: &str, value: &[u8]| {
            let mut d = data.clone();
            d.insert(key.into(), ByteString(value.to_vec()));
            d
        };
        let without = |key: &str| {
            let mut d = data.clone();
            d.remove(key);
            d
        };
        let b_data = b.to_secret_data();
        let cases = [
            (without(TLS_KEY), "tls.crt or tls.key is missing".to_owned()),
            (
                with(TLS_KEY, &b_data[TLS_KEY].0),
                "tls.key: the private key does not fit the certificate".to_owned(),
            ),
            (
                with(TLS_CRT, pem(&a.serving.cert_der).as_bytes()),
                "tls.crt holds 1 certificates; expected the serving certificate then its CA"
                    .to_owned(),
            ),
            (
                with(CA_CRT, &b_data[CA_CRT].0),
                "ca.crt lacks the CA of tls.crt".to_owned(),
            ),
            (
                with(TLS_KEY, b"not a key"),
                "tls.key: reading the private key".to_owned(),
            ),
        ];
        for (data, want) in cases {
            let err = Material::from_secret_data(&data).unwrap_err();
            assert!(err.starts_with(&want), "{err} (want {want})");
        }
    }

    fn provider_target() -> Target {
        Target {
            purpose: Purpose::ProviderServer,
            namespace: "ns".into(),
            secret_name: "provider-vault-tls".into(),
            hosts: vec!["provider-vault.ns.svc".into(), "127.0.0.1".into()],
            lifetime: Duration::from_secs(3000),
        }
    }

    /// A client certificate of `material` and the server certificate, checked as the provider
    /// server and the operator check them: rustls' verifiers over `ca.crt`.
    fn handshake_checks(material: &Material, ca_bundle: &[Vec<u8>]) -> Result<(), String> {
        use rustls::client::danger::ServerCertVerifier;
        use rustls::pki_types::{ServerName, UnixTime};
        let mut roots = rustls::RootCertStore::empty();
        for ca in ca_bundle {
            roots
                .add(CertificateDer::from(ca.clone()))
                .map_err(|e| e.to_string())?;
        }
        let roots = std::sync::Arc::new(roots);
        let provider = std::sync::Arc::new(crate::crypto_provider());
        let now = UnixTime::now();
        let client = material.client.as_ref().ok_or("no client certificate")?;
        rustls::server::WebPkiClientVerifier::builder_with_provider(
            roots.clone(),
            provider.clone(),
        )
        .build()
        .map_err(|e| e.to_string())?
        .verify_client_cert(
            &CertificateDer::from(client.cert_der.clone()),
            &[CertificateDer::from(client.ca_der.clone())],
            now,
        )
        .map_err(|e| format!("the client certificate: {e}"))?;
        rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|e| e.to_string())?
            .verify_server_cert(
                &CertificateDer::from(material.serving.cert_der.clone()),
                &[CertificateDer::from(material.serving.ca_der.clone())],
                &ServerName::try_from("provider-vault.ns.svc").map_err(|e| e.to_string())?,
                &[],
                now,
            )
            .map_err(|e| format!("the server certificate: {e}"))?;
        Ok(())
    }

    #[test]
    fn a_provider_servers_secret_holds_esos_keys_and_a_client_certificate_of_the_same_ca() {
        let target = provider_target();
        let material = Material::fresh(&target, SystemTime::now()).unwrap();
        let data = material.to_secret_data();
        let keys: Vec<&str> = data.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "ca.crt",
                "ca.key",
                "client.crt",
                "client.key",
                "tls.crt",
                "tls.key"
            ]
        );
        let back = Material::from_secret_data(&data).unwrap();
        // Equal but for the sub-second validity X.509 does not hold.
        assert!(back.to_secret_data() == data);
        assert!(back.unfit_for(&target).is_none());
        let client = back.client.as_ref().unwrap();
        assert_eq!(client.ca_der, back.serving.ca_der);
        assert!(client.hosts.is_empty());
        let (_, cert) = x509_parser::parse_x509_certificate(&client.cert_der).unwrap();
        assert_eq!(
            cert.subject()
                .iter_common_name()
                .next()
                .unwrap()
                .as_str()
                .unwrap(),
            CLIENT_COMMON_NAME
        );
        client.certified_key().unwrap();
        handshake_checks(&back, &back.ca_bundle).unwrap();
        assert_eq!(back.serving.hosts, target.hosts);

        // The webhook's Secret has no client certificate, which a provider server's needs.
        let webhook = Material::fresh(&settings().target(), SystemTime::now()).unwrap();
        assert!(webhook.client.is_none());
        assert_eq!(
            webhook.unfit_for(&target).as_deref(),
            Some("client.crt or client.key is missing")
        );
        assert!(webhook.unfit_for(&settings().target()).is_none());
    }

    #[test]
    fn a_namespaces_client_certificate_names_it_and_chains_to_the_servers_ca() {
        let target = provider_target();
        let now = SystemTime::now();
        let material = Material::fresh(&target, now).unwrap();
        // The CA's key survives the Secret; the operator's own certificate names no namespace.
        let back = Material::from_secret_data(&material.to_secret_data()).unwrap();
        assert!(back.serving.ca_key_pem.is_some());
        let identity = |der: &[u8]| api::caller_identity::CallerIdentity::of_certificate(der);
        assert_eq!(
            identity(&back.client.as_ref().unwrap().cert_der),
            Ok(api::caller_identity::CallerIdentity::Cluster)
        );

        let team = back.namespace_client("team-a").unwrap().unwrap();
        assert_eq!(
            identity(&team.cert_der),
            Ok(api::caller_identity::CallerIdentity::Namespace(
                "team-a".into()
            ))
        );
        assert_eq!(team.ca_der, back.serving.ca_der);
        assert_eq!(team.not_after, back.serving.not_after);
        team.certified_key().unwrap();
        let as_team = Material {
            client: Some(team),
            ..back.clone()
        };
        handshake_checks(&as_team, &back.ca_bundle).unwrap();

        // Through a rotation the next CA's key is kept too, and issues once promoted.
        let promoted =
            Material::from_secret_data(&back.prepare(&target, now).unwrap().to_secret_data())
                .unwrap()
                .promote()
                .unwrap();
        let team = promoted.namespace_client("team-a").unwrap().unwrap();
        assert_eq!(team.ca_der, promoted.serving.ca_der);
        assert_ne!(team.ca_der, back.serving.ca_der);

        // A Secret written before CA keys were kept issues nothing and is due for rotation.
        let mut data = material.to_secret_data();
        data.remove(CA_KEY);
        let old = Material::from_secret_data(&data).unwrap();
        assert!(old.namespace_client("team-a").unwrap().is_none());
        assert!(old.rotation_due(&target, now));
        // A CA key that is not the CA's is named.
        let other = Material::fresh(&target, now).unwrap().to_secret_data();
        data.insert(CA_KEY.into(), other[CA_KEY].clone());
        assert_eq!(
            Material::from_secret_data(&data).unwrap_err(),
            "ca.key is not the key of its CA"
        );
    }

    #[test]
    fn debug_output_holds_no_private_key() {
        let target = provider_target();
        let now = SystemTime::now();
        let material = Material::fresh(&target, now).unwrap();
        let material = material.prepare(&target, now).unwrap();
        assert!(material.serving.ca_key_pem.is_some());
        let team = material.namespace_client("team-a").unwrap().unwrap();
        for debug in [
            format!("{material:?}"),
            format!("{material:#?}"),
            format!("{team:?}"),
        ] {
            assert!(!debug.contains("PRIVATE KEY"), "{debug}");
            assert!(debug.contains("<redacted>"), "{debug}");
        }
    }

    #[test]
    fn a_bad_ca_key_is_dropped_and_the_ca_kept_for_a_two_step_rotation() {
        let target = provider_target();
        let now = SystemTime::now();
        let material = Material::fresh(&target, now).unwrap();
        let prepared = material.prepare(&target, now).unwrap();
        let other = Material::fresh(&target, now).unwrap().to_secret_data();
        let garbage = ByteString(b"not a key".to_vec());
        let cases = [
            (&material, CA_KEY, garbage.clone()),
            (&material, CA_KEY, other[CA_KEY].clone()),
            (&prepared, NEXT_CA_KEY, garbage),
        ];
        for (stored, key, bad) in cases {
            let mut data = stored.to_secret_data();
            data.insert(key.into(), bad);
            let secret = Secret {
                data: Some(data.clone()),
                ..Secret::default()
            };
            // Still usable, and only the bad key is left out: not replaced by a fresh CA that
            // the clients trusting this one would refuse.
            let kept = read(&secret, &target).unwrap();
            data.remove(key);
            assert!(kept.to_secret_data() == data, "{key}");
            assert_eq!(kept.serving.ca_der, stored.serving.ca_der);
            assert_eq!(kept.ca_bundle, stored.ca_bundle);
        }
        // Without its CA's key the Secret is due for rotation, whose two steps bring a new one.
        let mut data = material.to_secret_data();
        data.insert(CA_KEY.into(), other[CA_KEY].clone());
        let secret = Secret {
            data: Some(data),
            ..Secret::default()
        };
        let kept = read(&secret, &target).unwrap();
        assert!(kept.namespace_client("team-a").unwrap().is_none());
        assert!(kept.rotation_due(&target, now));
        let prepared = kept.prepare(&target, now).unwrap();
        assert!(!prepared.to_secret_data().contains_key(CA_KEY));
        let promoted = prepared.promote().unwrap();
        assert!(promoted.namespace_client("team-a").unwrap().is_some());
    }

    #[test]
    fn every_step_of_a_provider_rotation_lets_old_and_new_peers_meet() {
        let target = provider_target();
        let now = SystemTime::now();
        let first = Material::fresh(&target, now).unwrap();
        let prepared = first.prepare(&target, now).unwrap();
        assert!(prepared.client == first.client);
        let next_client = prepared.next_client.clone().unwrap();
        assert_eq!(next_client.ca_der, prepared.next.as_ref().unwrap().ca_der);
        let data = prepared.to_secret_data();
        let back = Material::from_secret_data(&data).unwrap();
        assert!(back.to_secret_data() == data);
        assert!(back.next_client.is_some());
        let promoted = prepared.promote().unwrap();
        assert!(promoted.client.as_ref() == Some(&next_client));
        assert!(promoted.next_client.is_none());
        // A server that still reads the prepared files trusts the promoted client, and the
        // operator, reading the promoted Secret, trusts the server it still meets.
        let mixed = Material {
            serving: prepared.serving.clone(),
            client: promoted.client.clone(),
            ..promoted.clone()
        };
        handshake_checks(&mixed, &prepared.ca_bundle).unwrap();
        handshake_checks(&mixed, &promoted.ca_bundle).unwrap();
        // Before the prepare step the new client would be refused: why there are two steps.
        assert!(handshake_checks(&mixed, &first.ca_bundle).is_err());

        // A client certificate signed by another CA than its server certificate's is named.
        let mut data = first.to_secret_data();
        let other = Material::fresh(&target, now).unwrap().to_secret_data();
        data.insert(CLIENT_CRT.into(), other[CLIENT_CRT].clone());
        data.insert(CLIENT_KEY.into(), other[CLIENT_KEY].clone());
        assert_eq!(
            Material::from_secret_data(&data).unwrap_err(),
            "client.crt is not signed by the CA of tls.crt"
        );
        // Rotation is due when the client certificate nears its end, as for the server's.
        assert!(!first.rotation_due(&target, now));
        assert!(first.rotation_due(&target, now + Duration::from_secs(2500)));
    }
}
