//! Speculative decoding in a comparison (issue 54): for each command with `--spec-type`, the
//! server's drafted and accepted tokens over its launches, and its greedy answers against
//! those of the command that is the same config without speculation, where one is compared.

use super::{command_name, CompareRound, ComparedCommand};
use crate::trial::acceptance::Acceptance;
use crate::trial::lossless::{self, Check};
use serde::{Deserialize, Serialize};

/// One speculative command of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeculationCheck {
    /// Index into the commands.
    pub command: usize,
    /// Its `--spec-type`.
    pub spec_type: String,
    /// Drafted and accepted tokens summed over its ok launches; None where nothing was drafted.
    pub acceptance: Option<Acceptance>,
    /// The command that is the same config without speculation, where there is one.
    pub reference: Option<usize>,
    /// Its answers against that command's (the first differing launch, else the first).
    pub check: Option<Check>,
    /// The outcomes of its launches that measured nothing (`degenerate`, ...), once each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_measured: Vec<String>,
}

/// The speculative commands' acceptance and losslessness over `rounds`.
pub fn checks(commands: &[ComparedCommand], rounds: &[CompareRound]) -> Vec<SpeculationCheck> {
    let replays = |c: usize| {
        rounds
            .iter()
            .flat_map(|r| &r.launches)
            .filter(move |l| l.command == c)
            .filter_map(|l| l.replay.as_ref())
    };
    let mut out = Vec::new();
    for (i, c) in commands.iter().enumerate() {
        let Some(spec) = c.config.spec_type else {
            continue;
        };
        let want = lossless::reference_of(&c.config);
        let reference = commands.iter().position(|k| k.config == want);
        let theirs = reference
            .and_then(|k| replays(k).find(|r| r.requests.iter().any(|q| q.answer.is_some())));
        let all: Vec<Check> = theirs
            .map(|t| {
                replays(i)
                    .filter_map(|mine| lossless::compare(mine, t))
                    .collect()
            })
            .unwrap_or_default();
        let mut not_measured: Vec<String> = Vec::new();
        for l in rounds.iter().flat_map(|r| &r.launches) {
            if l.command == i && l.replay.is_none() && !not_measured.contains(&l.outcome) {
                not_measured.push(l.outcome.clone());
            }
        }
        out.push(SpeculationCheck {
            not_measured,
            command: i,
            spec_type: spec.as_str().to_string(),
            acceptance: Acceptance::sum(replays(i).filter_map(|r| r.acceptance)),
            reference,
            check: all
                .iter()
                .find(|c| matches!(c, Check::Differs(_)))
                .or(all.first())
                .copied(),
        });
    }
    out
}

/// One line per speculative command: "B  ngram-mod: 61 % of drafted tokens accepted (...);
/// answers identical to A's (4 requests, 1,024 tokens, temperature 0)".
pub fn lines(checks: &[SpeculationCheck]) -> Vec<String> {
    checks
        .iter()
        .map(|s| {
            let drafted = match (s.acceptance, s.not_measured.is_empty()) {
                (Some(a), _) => a.line(&s.spec_type),
                (None, true) => format!("{}: nothing drafted", s.spec_type),
                (None, false) => format!(
                    "{}: no launch measured ({}; see the warnings)",
                    s.spec_type,
                    s.not_measured.join(", ")
                ),
            };
            let checked = match (s.reference, &s.check) {
                (Some(k), Some(c)) => {
                    lossless::check_phrase_against(c, &format!("{}'s", command_name(k)))
                }
                (Some(k), None) => format!(
                    "answers not compared (no launch of {} and {} both kept answers)",
                    command_name(k),
                    command_name(s.command)
                ),
                (None, _) => {
                    "answers not compared (no command is the same config without it)".to_string()
                }
            };
            format!("{}  {drafted}; {checked}", command_name(s.command))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trial::lossless::Divergence;

    #[test]
    fn each_speculative_command_says_what_it_accepted_and_how_its_answers_compared() {
        let check = |acceptance, check, not_measured: &[&str]| SpeculationCheck {
            command: 1,
            spec_type: "ngram-mod".into(),
            acceptance,
            reference: Some(0),
            check,
            not_measured: not_measured.iter().map(|s| s.to_string()).collect(),
        };
        let a = Acceptance {
            drafted: 200,
            accepted: 122,
            requests: 2,
        };
        let differs = Check::Differs(Divergence {
            request: 3,
            token: 57,
            reference: Some(1234),
            speculative: Some(987),
        });
        assert_eq!(
            lines(&[
                check(Some(a), Some(differs), &[]),
                check(None, None, &["degenerate"]),
            ]),
            vec![
                "B  ngram-mod: 61 % of drafted tokens accepted (122 of 200, 2 requests); not \
                 lossless: request 3's answer differs at token 57 (id 1234 without speculation, \
                 id 987 with it)"
                    .to_string(),
                "B  ngram-mod: no launch measured (degenerate; see the warnings); answers not \
                 compared (no launch of A and B both kept answers)"
                    .to_string(),
            ]
        );
    }
}
