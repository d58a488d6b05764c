//! What one render may spend. Go's templates have no bound on work; here a template is input
//! from a tenant, run inside the operator, so every action, loop iteration and function call
//! is charged in steps against a budget, and the clock is read as the steps are spent.

use std::time::{Duration, Instant};

/// About how many steps the executor takes in a millisecond of a release build. Functions
/// whose one call takes milliseconds (key generation, password hashing) cost their time in
/// steps at this rate, so the default budget holds a few seconds of such work in all.
pub(crate) const STEPS_PER_MS: u64 = 2_000;

/// What the slow functions cost a call, in steps: about their time in a release build, with
/// room for a slower machine. A render's default budget holds about five RSA keys of 4096 bits.
pub(crate) mod cost {
    use super::STEPS_PER_MS;

    /// Generating a 4096-bit RSA key: a second, give or take much (the search for primes).
    pub const RSA_4096: u64 = 1_000 * STEPS_PER_MS;
    /// Generating a 2048-bit RSA key.
    pub const RSA_2048: u64 = 150 * STEPS_PER_MS;
    /// An RSA signature or decryption with a key the template gives, which may be large.
    pub const RSA_PRIVATE: u64 = 50 * STEPS_PER_MS;
    /// bcrypt at Go's default cost of 10.
    pub const BCRYPT: u64 = 100 * STEPS_PER_MS;
    /// `derivePassword`'s scrypt (N = 32768, r = 8, p = 2: 32 MiB).
    pub const SCRYPT: u64 = 250 * STEPS_PER_MS;
    /// Reading a PKCS#12 archive, besides its key derivations: parsing keys and certificates.
    pub const PKCS12_READ: u64 = 5 * STEPS_PER_MS;
    /// One iteration of a PKCS#12 key derivation (PBKDF2-HMAC or PKCS#12's own SHA-1 one):
    /// about a microsecond, for the up to three hash blocks a derived key and IV take.
    pub const PKCS12_ITERATION: u64 = 2;

    /// Reading a PKCS#12 archive whose key derivations run `iterations` in all.
    pub fn pkcs12_read(iterations: u64) -> u64 {
        PKCS12_READ.saturating_add(iterations.saturating_mul(PKCS12_ITERATION))
    }
    /// Writing a PKCS#12 archive: two key derivations and a MAC of 2048 iterations each.
    pub const PKCS12_WRITE: u64 = 10 * STEPS_PER_MS;
}

/// Steps between two readings of the clock: reading it costs about as much as a step.
const CLOCK_EVERY: u64 = 1_024;

/// The steps and the time a render may spend. One budget may span several templates (every
/// key of an ExternalSecret, say), so that their number does not multiply it; once spent,
/// every later execution with it fails at its first step.
#[derive(Clone, Debug)]
pub struct Budget {
    limit: u64,
    spent: u64,
    time: Duration,
    /// `None` when `time` reaches past what the clock can represent.
    deadline: Option<Instant>,
    /// Steps spent since the clock was last read.
    unclocked: u64,
}

impl Budget {
    pub const DEFAULT_STEPS: u64 = 10_000_000;
    /// Far above what any real template takes; a backstop behind the steps, which bound work
    /// the executor can count but not, say, a slow machine.
    pub const DEFAULT_TIME: Duration = Duration::from_secs(10);

    /// `steps` to spend within `time` from now.
    pub fn new(steps: u64, time: Duration) -> Self {
        Self {
            limit: steps,
            spent: 0,
            time,
            deadline: Instant::now().checked_add(time),
            unclocked: 0,
        }
    }

    pub(crate) fn spend(&mut self, steps: u64) -> Result<(), Exceeded> {
        self.spent = self.spent.saturating_add(steps);
        if self.spent > self.limit {
            return Err(Exceeded::Steps { limit: self.limit });
        }
        self.unclocked = self.unclocked.saturating_add(steps);
        if self.unclocked >= CLOCK_EVERY {
            self.unclocked = 0;
            if self.deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Exceeded::Time { limit: self.time });
            }
        }
        Ok(())
    }

    /// Spends what a call of `function` costs, refusing before the call if it cannot be paid.
    pub(crate) fn spend_on_call(&mut self, function: &str, cost: u64) -> Result<(), Exceeded> {
        if cost > self.limit.saturating_sub(self.spent) {
            self.spent = self.limit.saturating_add(1);
            return Err(Exceeded::Call {
                function: function.into(),
                cost,
                limit: self.limit,
            });
        }
        self.spend(cost)
    }
}

impl Default for Budget {
    fn default() -> Self {
        Self::new(Self::DEFAULT_STEPS, Self::DEFAULT_TIME)
    }
}

/// Which part of its budget a template ran out of.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Exceeded {
    #[error("template exceeded its budget of {limit} steps")]
    Steps { limit: u64 },
    /// A call that costs more steps than remain.
    #[error("template exceeded its budget of {limit} steps: {function} costs {cost} steps")]
    Call {
        function: Box<str>,
        cost: u64,
        limit: u64,
    },
    #[error("template exceeded its time budget of {limit:?}")]
    Time { limit: Duration },
}
