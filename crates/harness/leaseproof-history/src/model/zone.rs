//! Difference constraints over clock readings: a difference-bound matrix.
//!
//! Goal: decide whether readings `v_1 … v_n` exist with `v_i − v_j ≤ c` for
//! every constraint given, and keep only the readings that still matter.
//! Method: the matrix of tightest bounds (entry `(i, j)` bounds `v_i − v_j`),
//! kept closed under shortest paths, as timed automata keep clock zones.
//! Variable 0 is the zero every constant is measured from. Closed, the
//! constraints have a solution iff no diagonal entry is negative (a
//! negative cycle is the proof there is none); dropping a variable loses no
//! constraint between the others, so a closed matrix is a canonical key.

/// No bound.
const UNBOUNDED: i64 = i64::MAX / 4;

/// A closed difference-bound matrix; `None` from a constraint means empty.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Zone {
    size: usize,
    bounds: Vec<i64>,
}

/// Index of a reading in a [`Zone`].
pub(crate) type Var = usize;

/// The zero every constant is measured from.
pub(crate) const ZERO: Var = 0;

fn add(a: i64, b: i64) -> i64 {
    if a >= UNBOUNDED || b >= UNBOUNDED {
        UNBOUNDED
    } else {
        a + b
    }
}

impl Zone {
    /// `variables` readings besides the zero, unconstrained.
    pub(crate) fn new(variables: usize) -> Zone {
        let size = variables + 1;
        let mut bounds = vec![UNBOUNDED; size * size];
        for i in 0..size {
            bounds[i * size + i] = 0;
        }
        Zone { size, bounds }
    }

    fn at(&self, i: Var, j: Var) -> i64 {
        self.bounds[i * self.size + j]
    }

    /// Adds `v_i − v_j ≤ c`; false (and the zone is then meaningless) when
    /// no reading satisfies the constraints any more.
    #[must_use]
    pub(crate) fn constrain(&mut self, i: Var, j: Var, c: i64) -> bool {
        if add(self.at(j, i), c) < 0 {
            return false;
        }
        if c >= self.at(i, j) {
            return true;
        }
        let size = self.size;
        let into_i: Vec<i64> = (0..size).map(|a| self.at(a, i)).collect();
        let from_j: Vec<i64> = (0..size).map(|b| self.at(j, b)).collect();
        for (a, &to_i) in into_i.iter().enumerate() {
            if to_i >= UNBOUNDED {
                continue;
            }
            for (b, &from) in from_j.iter().enumerate() {
                let through = add(add(to_i, c), from);
                let entry = &mut self.bounds[a * size + b];
                if through < *entry {
                    *entry = through;
                }
            }
        }
        true
    }

    /// `v_i = value`.
    #[must_use]
    pub(crate) fn fix(&mut self, i: Var, value: i64) -> bool {
        self.constrain(i, ZERO, value) && self.constrain(ZERO, i, -value)
    }

    /// `v_i − v_j = c`.
    #[must_use]
    pub(crate) fn equal(&mut self, i: Var, j: Var, c: i64) -> bool {
        self.constrain(i, j, c) && self.constrain(j, i, -c)
    }

    /// A new unconstrained reading.
    pub(crate) fn push(&mut self) -> Var {
        let old = self.size;
        let size = old + 1;
        let mut bounds = vec![UNBOUNDED; size * size];
        for i in 0..old {
            bounds[i * size..i * size + old].copy_from_slice(&self.bounds[i * old..(i + 1) * old]);
        }
        bounds[old * size + old] = 0;
        self.size = size;
        self.bounds = bounds;
        old
    }

    /// Copies reading `from` into the slot of `into`; the old `into` is
    /// forgotten.
    pub(crate) fn assign(&mut self, into: Var, from: Var) {
        let size = self.size;
        for k in 0..size {
            self.bounds[into * size + k] = self.at(from, k);
            self.bounds[k * size + into] = self.at(k, from);
        }
        self.bounds[into * size + into] = 0;
    }

    /// Forgets everything known of reading `i`; what it implied for the
    /// others stays.
    pub(crate) fn forget(&mut self, i: Var) {
        let size = self.size;
        for k in 0..size {
            if k != i {
                self.bounds[i * size + k] = UNBOUNDED;
                self.bounds[k * size + i] = UNBOUNDED;
            }
        }
    }

    /// Forgets every reading from `keep` on.
    pub(crate) fn truncate(&mut self, keep: usize) {
        let old = self.size;
        let mut bounds = Vec::with_capacity(keep * keep);
        for i in 0..keep {
            bounds.extend_from_slice(&self.bounds[i * old..i * old + keep]);
        }
        self.size = keep;
        self.bounds = bounds;
    }

    /// Readings that satisfy every constraint: each fixed in turn at its
    /// largest value (its smallest, when unbounded above; 0, when free).
    pub(crate) fn solution(&self) -> Vec<i64> {
        let mut zone = self.clone();
        let mut values = vec![0; self.size];
        for (i, value) in values.iter_mut().enumerate().skip(1) {
            let upper = zone.at(i, ZERO);
            let lower = zone.at(ZERO, i);
            *value = if upper < UNBOUNDED {
                upper
            } else if lower < UNBOUNDED {
                -lower
            } else {
                0
            };
            let fixed = zone.fix(i, *value);
            debug_assert!(fixed, "a closed zone has a solution at each bound");
        }
        values
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negative_cycle_empties_the_zone() {
        let mut zone = Zone::new(2);
        assert!(zone.constrain(1, 2, -5)); // v1 ≤ v2 − 5
        assert!(zone.constrain(2, 1, 5)); // v2 ≤ v1 + 5: v2 = v1 + 5
        assert!(
            !zone.constrain(2, 1, 4),
            "v2 ≤ v1 + 4 contradicts v2 = v1 + 5"
        );
    }

    #[test]
    fn bounds_pass_through_a_forgotten_reading() {
        let mut zone = Zone::new(2);
        assert!(zone.fix(1, 10));
        assert!(zone.constrain(2, 1, 3)); // v2 ≤ 13
        let mut forgotten = zone.clone();
        forgotten.assign(1, 2);
        forgotten.truncate(2);
        assert_eq!(forgotten.at(1, ZERO), 13, "the copy keeps v2's bound");
        let values = zone.solution();
        assert_eq!(values[1], 10);
        assert!(values[2] <= 13);
    }
}
