//! Exact decimal arithmetic with shopspring/decimal's semantics, as far as sprig's float math
//! uses it: construction from a float64's shortest decimal, exact `+ - *`, and division
//! rounded half away from zero at 16 places after the point.

use num_bigint::BigInt;
use num_traits::{Signed, Zero};

use crate::funcs::FuncError;

/// The places after the decimal point a quotient keeps (shopspring's `DivisionPrecision`).
const DIVISION_PRECISION: i64 = 16;

/// `mantissa × 10^exponent`.
#[derive(Clone, Debug)]
pub(super) struct Decimal {
    mantissa: BigInt,
    exponent: i64,
}

fn pow10(n: i64) -> BigInt {
    num_traits::pow(BigInt::from(10u8), usize::try_from(n).unwrap_or(0))
}

impl Decimal {
    /// shopspring's `NewFromFloat`: the shortest decimal that reads back as `f`.
    pub(super) fn from_f64(f: f64) -> Result<Self, FuncError> {
        if !f.is_finite() {
            return Err(FuncError(format!(
                "Cannot create a Decimal from {}",
                crate::gofmt::format_float_v(f)
            )));
        }
        if f == 0.0 {
            return Ok(Self {
                mantissa: BigInt::zero(),
                exponent: 0,
            });
        }
        // Rust's `{:e}` prints the shortest round-trip digits, as Go's shortest formatting does.
        let sci = format!("{f:e}");
        let (digits, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
        let exp: i64 = exp.parse().unwrap_or(0);
        let fraction_len = digits.split_once('.').map_or(0, |(_, frac)| frac.len()) as i64;
        let mantissa: BigInt = digits.replace('.', "").parse().unwrap_or_default();
        Ok(Self {
            mantissa,
            exponent: exp - fraction_len,
        })
    }

    /// The nearest float64 (shopspring's `Float64`, which rounds the exact rational).
    pub(super) fn to_f64(&self) -> f64 {
        // Rust's float parsing rounds correctly whatever the digit count.
        format!("{}e{}", self.mantissa, self.exponent)
            .parse()
            .unwrap_or(0.0)
    }

    /// Both mantissas scaled to the smaller exponent.
    fn aligned(&self, other: &Self) -> (BigInt, BigInt, i64) {
        let exponent = self.exponent.min(other.exponent);
        (
            &self.mantissa * pow10(self.exponent - exponent),
            &other.mantissa * pow10(other.exponent - exponent),
            exponent,
        )
    }

    pub(super) fn add(&self, other: &Self) -> Result<Self, FuncError> {
        let (a, b, exponent) = self.aligned(other);
        Ok(Self {
            mantissa: a + b,
            exponent,
        })
    }

    pub(super) fn sub(&self, other: &Self) -> Result<Self, FuncError> {
        let (a, b, exponent) = self.aligned(other);
        Ok(Self {
            mantissa: a - b,
            exponent,
        })
    }

    pub(super) fn mul(&self, other: &Self) -> Result<Self, FuncError> {
        Ok(Self {
            mantissa: &self.mantissa * &other.mantissa,
            exponent: self.exponent + other.exponent,
        })
    }

    /// shopspring's `Div`: the quotient truncated to 16 places, then rounded half away from
    /// zero on the remainder.
    pub(super) fn div(&self, other: &Self) -> Result<Self, FuncError> {
        if other.mantissa.is_zero() {
            return Err(FuncError("decimal division by 0".into()));
        }
        // self / other = (m1 / m2) × 10^(e1 - e2); scale so the integer quotient has 16 places.
        let shift = self.exponent - other.exponent + DIVISION_PRECISION;
        let (numerator, denominator) = if shift >= 0 {
            (&self.mantissa * pow10(shift), other.mantissa.clone())
        } else {
            (self.mantissa.clone(), &other.mantissa * pow10(-shift))
        };
        let mut quotient = &numerator / &denominator;
        let remainder = &numerator - &quotient * &denominator;
        if remainder.abs() * 2 >= denominator.abs() {
            if self.mantissa.is_negative() != other.mantissa.is_negative() {
                quotient -= 1;
            } else {
                quotient += 1;
            }
        }
        Ok(Self {
            mantissa: quotient,
            exponent: -DIVISION_PRECISION,
        })
    }
}
