//! sprig v3.3.0's functions as ESO vendors them (`runtime/template/v2/sprig`), without `env`,
//! `expandenv` and `getHostByName`. Each submodule registers one family of functions; `args`
//! holds the argument conversions they share.

pub mod args;
mod casing;
mod conversion;
mod defaults;
mod dicts;
mod gounicode;
mod json;
mod lists;
mod reflect;
mod regex;
mod semver;
mod strings;

// Math, encodings, hashes and crypto, dates, randomness, paths and URLs.
mod crypto;
mod dates;
mod encoding;
mod math;
mod paths;
mod random;

#[cfg(test)]
mod go_table;
#[cfg(test)]
mod testutil;

use crate::funcs::Funcs;

pub fn register(funcs: &mut Funcs) {
    strings::register(funcs);
    lists::register(funcs);
    dicts::register(funcs);
    defaults::register(funcs);
    json::register(funcs);
    conversion::register(funcs);
    regex::register(funcs);
    semver::register(funcs);
    reflect::register(funcs);

    math::register(funcs);
    encoding::register(funcs);
    crypto::register(funcs);
    dates::register(funcs);
    random::register(funcs);
    paths::register(funcs);
}
