//! Certificates: ESO's chain ordering (leaf, intermediates, root, linked by authority and
//! subject key identifiers, as in the Azure CSI provider it took it from), `filterCertChain`
//! and `certSANs`. The ordering is formatting only: nothing here verifies a signature.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use x509_parser::extensions::{GeneralName, ParsedExtension};

use super::args::text;
use super::pem::{self, CERTIFICATE};
use crate::funcs::{FuncError, FuncResult};
use crate::value::Value;

/// What ESO reads from a certificate.
#[derive(Debug, Clone)]
pub struct Cert {
    pub raw: Vec<u8>,
    /// Go's `AuthorityKeyId` and `SubjectKeyId`: `None` and empty compare equal, as Go's
    /// `bytes.Equal(nil, []byte{})` does.
    aki: Option<Vec<u8>>,
    ski: Option<Vec<u8>>,
    sans: Vec<String>,
    /// The subject as Go's `pkix.Name.String` prints it.
    pub subject: String,
}

fn bad_cert() -> FuncError {
    FuncError("x509: malformed certificate".to_owned())
}

/// Go's `x509.ParseCertificate`, for the fields ESO uses.
pub fn parse_cert(der: &[u8]) -> Result<Cert, FuncError> {
    let (rest, cert) = x509_parser::parse_x509_certificate(der).map_err(|_| bad_cert())?;
    if !rest.is_empty() {
        return Err(FuncError("x509: trailing data".to_owned()));
    }
    let (mut aki, mut ski) = (None, None);
    let (mut dns, mut ips, mut emails, mut uris) = (vec![], vec![], vec![], vec![]);
    for ext in cert.extensions() {
        match ext.parsed_extension() {
            ParsedExtension::AuthorityKeyIdentifier(a) => {
                aki = a.key_identifier.as_ref().map(|k| k.0.to_vec());
            }
            ParsedExtension::SubjectKeyIdentifier(k) => ski = Some(k.0.to_vec()),
            ParsedExtension::SubjectAlternativeName(san) => {
                for name in &san.general_names {
                    match name {
                        GeneralName::DNSName(s) => dns.push(s.to_string()),
                        GeneralName::RFC822Name(s) => emails.push(s.to_string()),
                        GeneralName::URI(s) => uris.push(s.to_string()),
                        GeneralName::IPAddress(b) => {
                            ips.push(go_ip_string(b).ok_or_else(|| {
                                FuncError(format!(
                                    "x509: cannot parse IP address of length {}",
                                    b.len()
                                ))
                            })?)
                        }
                        _ => {}
                    }
                }
            }
            ParsedExtension::ParseError { .. } => return Err(bad_cert()),
            _ => {}
        }
    }
    let sans = [dns, ips, emails, uris].concat();
    Ok(Cert {
        raw: der.to_vec(),
        aki,
        ski,
        sans,
        subject: super::subject::go_string(cert.subject()),
    })
}

/// Go's `net.IP.String`: an IPv4-mapped IPv6 address prints as IPv4.
fn go_ip_string(b: &[u8]) -> Option<String> {
    let ip = match b.len() {
        4 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(b).ok()?)),
        16 => {
            let v6 = Ipv6Addr::from(<[u8; 16]>::try_from(b).ok()?);
            v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
        }
        _ => return None,
    };
    Some(ip.to_string())
}

fn key_id(id: &Option<Vec<u8>>) -> &[u8] {
    id.as_deref().unwrap_or_default()
}

impl Cert {
    /// Self-signed as ESO judges it: no authority key id, or the same as its own.
    fn is_root(&self) -> bool {
        self.aki.is_none() || key_id(&self.aki) == key_id(&self.ski)
    }

    pub fn pem(&self) -> String {
        pem::encode_der(CERTIFICATE, &self.raw)
    }
}

/// Every PEM block of `data`, parsed as a certificate whatever its type.
pub fn parse_pem_certs(mut data: &[u8]) -> Result<Vec<Cert>, FuncError> {
    let mut certs = Vec::new();
    loop {
        let (block, rest) = pem::decode(data);
        data = rest;
        let Some(block) = block else {
            return Ok(certs);
        };
        certs.push(parse_cert(&block.bytes)?);
    }
}

/// ESO's `fetchX509CertChains`: each certificate's parent is the first other one whose subject
/// key id equals its authority key id; the single certificate that is nobody's parent is the
/// leaf, and the chain follows parents from there.
pub fn order_chain(certs: Vec<Cert>) -> Result<Vec<Cert>, FuncError> {
    let n = certs.len();
    let mut parent = vec![None; n];
    let mut is_parent = vec![false; n];
    for i in 0..n {
        let found = (0..n).find(|&j| j != i && key_id(&certs[i].aki) == key_id(&certs[j].ski));
        if let Some(j) = found {
            is_parent[j] = true;
            parent[i] = Some(j);
        }
    }
    let mut leaves = (0..n).filter(|&i| !is_parent[i]);
    let Some(leaf) = leaves.next() else {
        return Err(FuncError("no leaf certificate found".to_owned()));
    };
    if leaves.next().is_some() {
        return Err(FuncError(
            "found multiple leaf or disjunct certificates".to_owned(),
        ));
    }
    let mut order = Vec::new();
    let mut at = Some(leaf);
    while let Some(i) = at {
        if order.len() == n {
            return Err(FuncError("constructing chain resulted in cycle".to_owned()));
        }
        order.push(i);
        at = parent[i];
    }
    Ok(order.into_iter().map(|i| certs[i].clone()).collect())
}

/// `filterCertChain leaf|intermediate|root PEM`: one part of the ordered chain, or empty.
pub fn filter_cert_chain(args: &[Value]) -> FuncResult {
    let kind = text(&args[0])?;
    let chain = order_chain(parse_pem_certs(text(&args[1])?.as_bytes())?)?;
    let out = match kind {
        "leaf" => {
            let leaf = &chain[0];
            if leaf.aki.is_some() && key_id(&leaf.aki) != key_id(&leaf.ski) {
                leaf.pem()
            } else {
                String::new()
            }
        }
        "intermediate" => chain[1..]
            .iter()
            .take_while(|c| !c.is_root())
            .map(Cert::pem)
            .collect(),
        "root" => chain
            .last()
            .filter(|c| c.is_root())
            .map(Cert::pem)
            .unwrap_or_default(),
        _ => String::new(),
    };
    Ok(Value::String(out))
}

/// `certSANs PEM`: the first block's DNS names, IP addresses, emails and URIs, in that order.
pub fn cert_sans(args: &[Value]) -> FuncResult {
    let input = pem::trim_junk(text(&args[0])?.as_bytes());
    let (Some(block), _) = pem::decode(input) else {
        return Err(FuncError("failed to decode PEM block".to_owned()));
    };
    let cert = parse_cert(&block.bytes)
        .map_err(|e| FuncError(format!("failed to parse certificate: {}", e.0)))?;
    Ok(Value::List(
        cert.sans.into_iter().map(Value::String).collect(),
    ))
}

#[cfg(test)]
mod tests {
    use crate::eso::testutil::{call, fixture_text};
    use crate::value::Value;

    // Expected outputs printed by ESO's functions.
    #[test]
    fn filters_a_shuffled_chain() {
        let shuffled = fixture_text("shuffled.pem");
        for part in ["leaf", "intermediate", "root"] {
            assert_eq!(
                call("filterCertChain", &[part, &shuffled]).unwrap(),
                Value::String(fixture_text(&format!("expected/chain-{part}"))),
                "{part}"
            );
        }
        assert_eq!(
            call("filterCertChain", &["other", &shuffled]).unwrap(),
            Value::from("")
        );
        // A self-signed certificate is a root, not a leaf; a lone leaf has no root.
        let root = fixture_text("root.crt");
        assert_eq!(
            call("filterCertChain", &["leaf", &root]).unwrap(),
            Value::from("")
        );
        assert_eq!(
            call("filterCertChain", &["root", &root]).unwrap(),
            Value::String(root)
        );
        let leaf = fixture_text("leaf.crt");
        assert_eq!(
            call("filterCertChain", &["root", &leaf]).unwrap(),
            Value::from("")
        );
        assert_eq!(
            call("filterCertChain", &["intermediate", &leaf]).unwrap(),
            Value::from("")
        );
    }

    #[test]
    fn chain_errors() {
        let err = |input: &str| call("filterCertChain", &["leaf", input]).unwrap_err().0;
        assert_eq!(err(""), "no leaf certificate found");
        let two_leaves = format!("{}{}", fixture_text("leaf.crt"), fixture_text("ec.crt"));
        assert_eq!(
            err(&two_leaves),
            "found multiple leaf or disjunct certificates"
        );
    }

    #[test]
    fn sans_in_go_order() {
        let Value::List(sans) = call("certSANs", &[&fixture_text("chain.pem")]).unwrap() else {
            panic!("not a list")
        };
        let sans: Vec<String> = sans.iter().map(ToString::to_string).collect();
        let expected: Vec<String> =
            serde_json::from_str(&fixture_text("expected/leaf.sans")).unwrap();
        assert_eq!(sans, expected);
        assert_eq!(
            call("certSANs", &["junk"]).unwrap_err().0,
            "failed to decode PEM block"
        );
        let err = call("certSANs", &[&fixture_text("leaf.key")])
            .unwrap_err()
            .0;
        assert!(
            err.starts_with("failed to parse certificate: x509: "),
            "{err}"
        );
    }
}
