//! Splitting a run across machines: `--partition K/N` keeps share K of N of the selection's
//! variant × scenario × repetition items, chosen by a stable hash as cargo-nextest's
//! `--partition hash:K/N` chooses tests.
//!
//! Item `variant::scenario::repetition` (UTF-8, the repetition in decimal from 1) belongs to
//! partition `1 + (h mod N)`, where `h` is the first 8 bytes, read big-endian, of the
//! item's SHA-256. Nothing else goes in: an item falls in the same partition on every
//! machine, run and release, whatever else is selected, so the N partitions of a selection
//! are disjoint and together are the whole selection.

use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;

use sha2::{Digest, Sha256};

/// Share `index` of `total` (1 ≤ index ≤ total), as `--partition K/N` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    index: u64,
    total: NonZeroU64,
}

impl Partition {
    /// Whether this share holds repetition `repetition` of `scenario` on `variant`.
    pub fn contains(&self, variant: &str, scenario: &str, repetition: u32) -> bool {
        assign(variant, scenario, repetition, self.total) == self.index
    }
}

/// The repetitions, from 1 to `repeat`, of `scenario` on `variant` that `share` holds; all
/// of them without a share.
pub fn repetitions(
    share: Option<Partition>,
    variant: &str,
    scenario: &str,
    repeat: u32,
) -> impl Iterator<Item = u32> {
    (1..=repeat).filter(move |&r| share.is_none_or(|p| p.contains(variant, scenario, r)))
}

/// The partition, from 1 to `total`, that repetition `repetition` of `scenario` on
/// `variant` belongs to: `1 + (h mod total)`, `h` the first 8 bytes (big-endian) of the
/// SHA-256 of `variant::scenario::repetition`.
pub fn assign(variant: &str, scenario: &str, repetition: u32, total: NonZeroU64) -> u64 {
    let digest = Sha256::digest(format!("{variant}::{scenario}::{repetition}"));
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    1 + u64::from_be_bytes(first) % total.get()
}

impl FromStr for Partition {
    type Err = String;

    /// Reads `K/N`; the error says what is wrong with it, without naming the flag.
    fn from_str(text: &str) -> Result<Self, String> {
        let numbers = text
            .split_once('/')
            .and_then(|(k, n)| Some((k.parse::<u64>().ok()?, n.parse::<u64>().ok()?)));
        let Some((index, total)) = numbers else {
            return Err("expected K/N, two whole numbers such as 2/3".to_owned());
        };
        let Some(total) = NonZeroU64::new(total) else {
            return Err("N must be at least 1".to_owned());
        };
        if !(1..=total.get()).contains(&index) {
            return Err(format!("K must be 1..={total}"));
        }
        Ok(Self { index, total })
    }
}

impl fmt::Display for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(n: u64) -> NonZeroU64 {
        NonZeroU64::new(n).expect("non-zero")
    }

    #[test]
    fn an_item_falls_where_the_documented_formula_puts_it() {
        // `printf 'docker::lifecycle::1' | sha256sum` (coreutils) begins a95a4ec7cb15e846,
        // `printf 'e2b::core-tier::3' | sha256sum` begins 59d7c36b090d9940.
        for (variant, scenario, repetition, hex) in [
            ("docker", "lifecycle", 1, "a95a4ec7cb15e846"),
            ("e2b", "core-tier", 3, "59d7c36b090d9940"),
        ] {
            let h = u64::from_str_radix(hex, 16).expect("hex");
            for n in 1..=7 {
                assert_eq!(
                    assign(variant, scenario, repetition, total(n)),
                    1 + h % n,
                    "{variant}::{scenario}::{repetition} among {n}"
                );
            }
        }
        // The same, worked by hand: 0xa95a4ec7cb15e846 ≡ 2 (mod 4), so partition 3 of 4;
        // 0x59d7c36b090d9940 ≡ 2 (mod 3), so partition 3 of 3.
        assert_eq!(assign("docker", "lifecycle", 1, total(4)), 3);
        assert_eq!(assign("e2b", "core-tier", 3, total(3)), 3);
    }

    #[test]
    fn the_partitions_of_a_plan_are_disjoint_and_cover_it() {
        for n in 1..=5 {
            for repetition in 1..=20 {
                let holding: Vec<u64> = (1..=n)
                    .filter(|&k| {
                        let p: Partition = format!("{k}/{n}").parse().expect("valid");
                        p.contains("modal", "burst", repetition)
                    })
                    .collect();
                assert_eq!(holding.len(), 1, "{n} partitions, repetition {repetition}");
            }
        }
    }

    #[test]
    fn bad_forms_are_refused_saying_why() {
        for (text, why) in [
            ("0/3", "K must be 1..=3"),
            ("4/3", "K must be 1..=3"),
            ("1/0", "N must be at least 1"),
            ("3", "expected K/N, two whole numbers such as 2/3"),
            ("1/2/3", "expected K/N, two whole numbers such as 2/3"),
            ("-1/3", "expected K/N, two whole numbers such as 2/3"),
            ("a/b", "expected K/N, two whole numbers such as 2/3"),
            ("", "expected K/N, two whole numbers such as 2/3"),
        ] {
            assert_eq!(text.parse::<Partition>(), Err(why.to_owned()), "{text}");
        }
        let p: Partition = "2/3".parse().expect("valid");
        assert_eq!(p.to_string(), "2/3");
        assert_eq!(
            "1/1".parse::<Partition>().map(|p| p.to_string()),
            Ok("1/1".to_owned())
        );
    }
}
