//! Speculative decoding in a comparison (issue 54): for each command with `--spec-type`, the
//! server's drafted and accepted tokens over its launches, and its greedy answers against
//! those of the command that is the same config without speculation, where one is compared.

use super::{command_name, CompareRound, ComparedCommand};
use crate::trial::acceptance::{self, Acceptance};
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
    /// Its answers against that command's (a lossy launch, else one at a near-tie, else the
    /// first).
    pub check: Option<Check>,
    /// The outcomes of its launches that measured nothing (`degenerate`, ...), once each;
    /// never `ok`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_measured: Vec<String>,
    /// Its launches that measured something: a trace's replay, the request shapes or the
    /// fixed request (their drafts are counted in `acceptance`).
    #[serde(default)]
    pub measured: u32,
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
        // Every launch's probes count for all: greedy answers repeat, so a launch that ran
        // before the reference's (nothing to probe against yet) diverges where a later did.
        let probes: Vec<lossless::TieProbe> =
            replays(i).flat_map(|r| r.probes.iter().cloned()).collect();
        let all: Vec<Check> = theirs
            .map(|t| {
                replays(i)
                    .filter_map(|mine| lossless::compare_with(mine, t, &probes))
                    .collect()
            })
            .unwrap_or_default();
        let mut not_measured: Vec<String> = Vec::new();
        let mut measured = 0u32;
        let mut drafted = Vec::new();
        for l in rounds.iter().flat_map(|r| &r.launches) {
            if l.command != i {
                continue;
            }
            // A launch with numbers measured (a trace's replay, the request shapes, else the
            // fixed request) counts its drafts; one without says why once (its outcome, never
            // `ok`).
            if l.replay.is_some() || !l.shapes.is_empty() || l.gen_tps.is_some() {
                measured += 1;
                drafted.extend(match &l.replay {
                    Some(r) => r.drafted(),
                    None if !l.shapes.is_empty() => acceptance::of_shapes(&l.shapes),
                    None => l.drafts,
                });
            } else if !not_measured.contains(&l.outcome) {
                not_measured.push(l.outcome.clone());
            }
        }
        out.push(SpeculationCheck {
            not_measured,
            measured,
            command: i,
            spec_type: spec.as_str().to_string(),
            acceptance: Acceptance::sum(drafted),
            reference,
            // The worst launch: a lossy one, else one at a near-tie, else the first.
            check: all
                .iter()
                .find(|c| matches!(c, Check::Differs(_)))
                .or(all.iter().find(|c| matches!(c, Check::NearTie { .. })))
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
            let drafted = match (s.acceptance, s.measured) {
                (Some(a), _) => a.line(&s.spec_type),
                (None, 0) if !s.not_measured.is_empty() => format!(
                    "{}: no launch measured ({}; see the warnings)",
                    s.spec_type,
                    s.not_measured.join(", ")
                ),
                (None, _) => format!("{}: nothing drafted", s.spec_type),
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
            measured: u32::from(not_measured.is_empty()),
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

    /// A request-shape comparison (no trace): the launches' shapes carry the drafts, and an ok
    /// launch is never listed as "not measured" (on main it was: "no launch measured (ok)").
    #[test]
    fn a_shape_workload_counts_its_drafts_and_never_calls_ok_unmeasured() {
        use crate::compare::CompareLaunch;
        let command = |line: &str, spec| ComparedCommand {
            name: String::new(),
            line: line.into(),
            config: crate::config::LaunchConfig {
                spec_type: spec,
                ..crate::config::LaunchConfig::baseline(4096)
            },
        };
        let commands = [
            command("A", None),
            command("B", Some(crate::config::SpecType::NgramMod)),
        ];
        let launch = |c: usize, drafts: Option<(u32, u32)>| CompareLaunch {
            command: c,
            trial_id: 1,
            outcome: "ok".into(),
            gen_tps: Some(50.0),
            prompt_tps: Some(500.0),
            peak_vram_mib: None,
            shapes: vec![acceptance::shape_drafting(
                drafts.map(|d| d.0),
                drafts.map(|d| d.1),
            )],
            peak_vram_per_gpu_mib: Vec::new(),
            message: String::new(),
            replay: None,
            drafts: None,
        };
        let rounds = |drafts| {
            vec![CompareRound {
                order: vec![0, 1],
                launches: vec![launch(0, None), launch(1, drafts)],
            }]
        };
        let c = checks(&commands, &rounds(Some((375, 150))));
        assert_eq!(c.len(), 1);
        let a = c[0].acceptance.expect("the shapes' drafts are counted");
        assert_eq!((a.drafted, a.accepted, a.requests), (375, 150, 1));
        assert!(c[0].not_measured.is_empty(), "{:?}", c[0].not_measured);
        assert!(lines(&c)[0].starts_with("B  ngram-mod: 40 % of drafted tokens accepted"));
        // An ok launch of the fixed request alone counts its repetitions' drafts (on main it
        // said "drafts not counted on the fixed request").
        let mut fixed = rounds(None);
        fixed[0].launches[1].shapes.clear();
        fixed[0].launches[1].drafts = Acceptance::of([(Some(96), Some(40)), (Some(64), Some(24))]);
        let c = checks(&commands, &fixed);
        assert!(c[0].not_measured.is_empty(), "{:?}", c[0].not_measured);
        assert_eq!(
            lines(&c)[0],
            "B  ngram-mod: 40 % of drafted tokens accepted (64 of 160, 2 requests); answers not \
             compared (no launch of A and B both kept answers)"
        );
        // An ok launch that drafted nothing says so.
        let c = checks(&commands, &rounds(None));
        assert!(c[0].not_measured.is_empty(), "{:?}", c[0].not_measured);
        assert!(
            lines(&c)[0].starts_with("B  ngram-mod: nothing drafted;"),
            "{}",
            lines(&c)[0]
        );
    }
}
