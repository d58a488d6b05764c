//! A certificate subject as Go's `pkix.Name.String` prints it (go-pkcs12 names trust-store
//! entries so): attributes Go has no field for first, then C, ST, L, STREET, POSTALCODE, O, OU,
//! CN and SERIALNUMBER, each field's values in one RDN, the whole printed last RDN first.

use x509_parser::x509::X509Name;

/// Attribute types Go keeps in named fields, in the order `ToRDNSequence` emits them.
const FIELDS: [(&str, &str); 9] = [
    ("2.5.4.6", "C"),
    ("2.5.4.8", "ST"),
    ("2.5.4.7", "L"),
    ("2.5.4.9", "STREET"),
    ("2.5.4.17", "POSTALCODE"),
    ("2.5.4.10", "O"),
    ("2.5.4.11", "OU"),
    ("2.5.4.3", "CN"),
    ("2.5.4.5", "SERIALNUMBER"),
];

/// RFC 2253 escaping as Go does it (by byte position, for leading `#` and edge spaces).
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for (k, c) in value.char_indices() {
        let escape = match c {
            ',' | '+' | '"' | '\\' | '<' | '>' | ';' => true,
            ' ' => k == 0 || k == value.len() - 1,
            '#' => k == 0,
            _ => false,
        };
        if escape {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Go's `asn1.Marshal` of a string: PrintableString when it can, else UTF8String.
fn marshal_string(value: &str) -> Vec<u8> {
    let printable = value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b" '()+,-./:=?".contains(&b));
    let mut out = vec![if printable { 0x13 } else { 0x0c }];
    let len = value.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|&b| b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(value.as_bytes());
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One printed attribute, `TYPE=value`.
fn print(oid: &str, value: &str) -> String {
    match FIELDS.iter().find(|(o, _)| *o == oid) {
        Some((_, name)) => format!("{name}={}", escape(value)),
        None => format!("{oid}=#{}", hex(&marshal_string(value))),
    }
}

pub fn go_string(name: &X509Name) -> String {
    let attrs: Vec<(String, String)> = name
        .iter_attributes()
        .map(|a| {
            let value = a
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|_| String::from_utf8_lossy(a.attr_value().data).into_owned());
            (a.attr_type().to_id_string(), value)
        })
        .collect();
    let mut rdns: Vec<Vec<String>> = attrs
        .iter()
        .filter(|(oid, _)| !FIELDS.iter().any(|(o, _)| o == oid))
        .map(|(oid, v)| vec![print(oid, v)])
        .collect();
    for (oid, _) in FIELDS {
        let values: Vec<&String> = attrs
            .iter()
            .filter(|(o, _)| o == oid)
            .map(|(_, v)| v)
            .collect();
        // Go keeps only the last CN and SERIALNUMBER, and skips them when empty.
        let values = match oid {
            "2.5.4.3" | "2.5.4.5" => values
                .last()
                .filter(|v| !v.is_empty())
                .into_iter()
                .copied()
                .collect(),
            _ => values,
        };
        if !values.is_empty() {
            rdns.push(values.iter().map(|v| print(oid, v)).collect());
        }
    }
    rdns.iter()
        .rev()
        .map(|rdn| rdn.join("+"))
        .collect::<Vec<_>>()
        .join(",")
}
