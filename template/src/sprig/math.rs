//! Sprig's arithmetic: int64 math with Go's wrapping, float math done in exact decimals (as
//! sprig's shopspring/decimal does, so `addf 1.1 2.2` is 3.3), and integer sequences.

mod decimal;

use super::args::{float_param as expect_float, int_param as expect_int, to_float64, to_int64};
use crate::funcs::{Arity, FuncError, FuncResult, Funcs};
use crate::value::Value;
use decimal::Decimal;

/// The longest sequence `until`, `untilStep` and `seq` build: Go would allocate whatever it is
/// asked for, and a template must not make the operator do that.
pub(crate) const MAX_SEQUENCE: usize = 1_000_000;

pub fn register(funcs: &mut Funcs) {
    funcs.insert("add", Arity::AtLeast(0), add);
    funcs.insert("add1", Arity::Exact(1), |a| {
        Ok(Value::Int(to_int64(&a[0]).wrapping_add(1)))
    });
    funcs.insert("sub", Arity::Exact(2), |a| {
        Ok(Value::Int(to_int64(&a[0]).wrapping_sub(to_int64(&a[1]))))
    });
    funcs.insert("div", Arity::Exact(2), div);
    funcs.insert("mod", Arity::Exact(2), modulo);
    funcs.insert("mul", Arity::AtLeast(1), mul);
    funcs.insert("max", Arity::AtLeast(1), max);
    funcs.insert("biggest", Arity::AtLeast(1), max);
    funcs.insert("min", Arity::AtLeast(1), min);
    funcs.insert("floor", Arity::Exact(1), |a| {
        Ok(Value::Float(to_float64(&a[0]).floor()))
    });
    funcs.insert("ceil", Arity::Exact(1), |a| {
        Ok(Value::Float(to_float64(&a[0]).ceil()))
    });
    funcs.insert("round", Arity::AtLeast(2), round);
    funcs.insert("maxf", Arity::AtLeast(1), maxf);
    funcs.insert("minf", Arity::AtLeast(1), minf);
    funcs.insert("addf", Arity::AtLeast(0), |a| {
        decimal_fold(&Value::Float(0.0), a, Decimal::add)
    });
    funcs.insert("add1f", Arity::Exact(1), |a| {
        decimal_fold(&a[0], &[Value::Int(1)], Decimal::add)
    });
    funcs.insert("subf", Arity::AtLeast(1), |a| {
        decimal_fold(&a[0], &a[1..], Decimal::sub)
    });
    funcs.insert("mulf", Arity::AtLeast(1), |a| {
        decimal_fold(&a[0], &a[1..], Decimal::mul)
    });
    funcs.insert("divf", Arity::AtLeast(1), |a| {
        decimal_fold(&a[0], &a[1..], Decimal::div)
    });
    funcs.insert("until", Arity::Exact(1), until);
    funcs.insert("untilStep", Arity::Exact(3), until_step);
    funcs.insert("seq", Arity::AtLeast(0), seq);
}

fn add(args: &[Value]) -> FuncResult {
    Ok(Value::Int(
        args.iter()
            .fold(0i64, |sum, v| sum.wrapping_add(to_int64(v))),
    ))
}

fn mul(args: &[Value]) -> FuncResult {
    Ok(Value::Int(
        args[1..]
            .iter()
            .fold(to_int64(&args[0]), |p, v| p.wrapping_mul(to_int64(v))),
    ))
}

/// Go panics on an integer division by zero; the template sees the panic as this error.
fn divide_by_zero() -> FuncError {
    FuncError("runtime error: integer divide by zero".into())
}

fn div(args: &[Value]) -> FuncResult {
    let (a, b) = (to_int64(&args[0]), to_int64(&args[1]));
    if b == 0 {
        return Err(divide_by_zero());
    }
    // Go defines MinInt64 / -1 as MinInt64 rather than trapping.
    Ok(Value::Int(a.wrapping_div(b)))
}

fn modulo(args: &[Value]) -> FuncResult {
    let (a, b) = (to_int64(&args[0]), to_int64(&args[1]));
    if b == 0 {
        return Err(divide_by_zero());
    }
    Ok(Value::Int(a.wrapping_rem(b)))
}

fn max(args: &[Value]) -> FuncResult {
    Ok(Value::Int(args.iter().map(to_int64).max().unwrap_or(0)))
}

fn min(args: &[Value]) -> FuncResult {
    Ok(Value::Int(args.iter().map(to_int64).min().unwrap_or(0)))
}

/// Go's `math.Max`: NaN wins over everything, and +0 over -0.
fn go_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == 0.0 && b == 0.0 {
        if a.is_sign_negative() { b } else { a }
    } else if a > b {
        a
    } else {
        b
    }
}

/// Go's `math.Min`: NaN wins over everything, and -0 over +0.
fn go_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == 0.0 && b == 0.0 {
        if a.is_sign_negative() { a } else { b }
    } else if a < b {
        a
    } else {
        b
    }
}

fn maxf(args: &[Value]) -> FuncResult {
    let first = to_float64(&args[0]);
    Ok(Value::Float(
        args[1..]
            .iter()
            .fold(first, |m, v| go_max(m, to_float64(v))),
    ))
}

fn minf(args: &[Value]) -> FuncResult {
    let first = to_float64(&args[0]);
    Ok(Value::Float(
        args[1..]
            .iter()
            .fold(first, |m, v| go_min(m, to_float64(v))),
    ))
}

/// `round x places [roundOn]`: scales by 10^places, rounds up when the fraction reaches
/// `roundOn` (0.5 unless given), and scales back.
fn round(args: &[Value]) -> FuncResult {
    let val = to_float64(&args[0]);
    let places = expect_int(&args[1])?;
    let mut round_on = 0.5;
    for (i, opt) in args[2..].iter().enumerate() {
        let f = expect_float(opt)?;
        if i == 0 {
            round_on = f;
        }
    }
    let pow = pow10(places);
    let digit = pow * val;
    let fraction = digit.fract();
    let rounded = if fraction >= round_on {
        digit.ceil()
    } else {
        digit.floor()
    };
    Ok(Value::Float(rounded / pow))
}

/// Go's `math.Pow(10, n)` for an integer n: a negative power is the reciprocal of the positive.
fn pow10(n: i64) -> f64 {
    let magnitude = 10f64.powf(n.unsigned_abs() as f64);
    if n < 0 { 1.0 / magnitude } else { magnitude }
}

/// Sprig's float math: each operand becomes the shortest decimal that reads back as its
/// float64, the operation runs exactly, and the result rounds to the nearest float64.
fn decimal_fold(
    first: &Value,
    rest: &[Value],
    op: fn(&Decimal, &Decimal) -> Result<Decimal, FuncError>,
) -> FuncResult {
    let mut acc = Decimal::from_f64(to_float64(first))?;
    for v in rest {
        acc = op(&acc, &Decimal::from_f64(to_float64(v))?)?;
    }
    Ok(Value::Float(acc.to_f64()))
}

fn until(args: &[Value]) -> FuncResult {
    let count = expect_int(&args[0])?;
    let step = if count < 0 { -1 } else { 1 };
    ints(step_range(0, count, step)?)
}

fn until_step(args: &[Value]) -> FuncResult {
    let start = expect_int(&args[0])?;
    let stop = expect_int(&args[1])?;
    let step = expect_int(&args[2])?;
    ints(step_range(start, stop, step)?)
}

fn ints(v: Vec<i64>) -> FuncResult {
    Ok(Value::List(v.into_iter().map(Value::Int).collect()))
}

/// Sprig's `untilStep`: from `start` toward `stop` (exclusive) by `step`; a step pointing
/// away from `stop` gives nothing. Go's int additions wrap, so they do here too.
fn step_range(start: i64, stop: i64, step: i64) -> Result<Vec<i64>, FuncError> {
    let mut out = Vec::new();
    let descending = stop < start;
    if (descending && step >= 0) || (!descending && step <= 0) {
        return Ok(out);
    }
    let mut i = start;
    while (descending && i > stop) || (!descending && i < stop) {
        if out.len() == MAX_SEQUENCE {
            return Err(FuncError(format!(
                "sequence longer than {MAX_SEQUENCE} elements"
            )));
        }
        out.push(i);
        i = i.wrapping_add(step);
    }
    Ok(out)
}

/// Sprig's `seq`, like the Unix command: `seq last`, `seq first last`, `seq first step last`,
/// printed space-separated. Any other number of arguments gives an empty string.
fn seq(args: &[Value]) -> FuncResult {
    let params = args.iter().map(expect_int).collect::<Result<Vec<_>, _>>()?;
    let values = match params[..] {
        [end] => {
            let increment = if end < 1 { -1 } else { 1 };
            step_range(1, end.wrapping_add(increment), increment)?
        }
        [start, end] => {
            let step = if end < start { -1 } else { 1 };
            step_range(start, end.wrapping_add(step), step)?
        }
        [start, step, end] => {
            let increment = if end < start { -1 } else { 1 };
            if end < start && step > 0 {
                Vec::new()
            } else {
                step_range(start, end.wrapping_add(increment), step)?
            }
        }
        _ => Vec::new(),
    };
    let text: Vec<String> = values.iter().map(i64::to_string).collect();
    Ok(Value::String(text.join(" ")))
}

#[cfg(test)]
mod tests;
