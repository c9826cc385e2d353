//! The fuzz smoke that runs on every `cargo test`: each target over its
//! kept corpus (`fuzz/corpus/<target>/`), then over a bounded number of
//! deterministic mutations of it. Long, coverage-guided runs are
//! `cargo xtask fuzz` (cargo-fuzz, libFuzzer).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::path::PathBuf;
use std::time::{Duration, Instant};

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    files.iter().map(|f| std::fs::read(f).unwrap()).collect()
}

/// xorshift: the same mutations on every run and machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One mutation: flip, insert, delete, duplicate a run, or splice two seeds.
fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut data = seeds[rng.below(seeds.len())].clone();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(data.len() + 1);
        match rng.below(5) {
            0 if !data.is_empty() => {
                let i = at.min(data.len() - 1);
                data[i] ^= 1 << rng.below(8);
            }
            1 => data.insert(at, rng.next() as u8),
            2 if at < data.len() => {
                data.remove(at);
            }
            3 if at < data.len() => {
                let end = (at + 1 + rng.below(16)).min(data.len());
                let run = data[at..end].to_vec();
                for _ in 0..rng.below(64) {
                    data.splice(at..at, run.iter().copied());
                }
            }
            _ => {
                let other = &seeds[rng.below(seeds.len())];
                let from = rng.below(other.len() + 1);
                data.truncate(at);
                data.extend_from_slice(&other[from..]);
            }
        }
    }
    data
}

#[test]
fn every_target_survives_its_corpus_and_mutations_of_it() {
    for (name, target) in codemode_fuzz::TARGETS {
        let seeds = corpus(name);
        assert!(!seeds.is_empty(), "fuzz/corpus/{name} is empty");
        for seed in &seeds {
            target(seed);
        }
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ name.len() as u64);
        let until = Instant::now() + Duration::from_millis(1500);
        let mut runs = 0;
        while runs < 2_000 && Instant::now() < until {
            target(&mutate(&mut rng, &seeds));
            runs += 1;
        }
    }
}
