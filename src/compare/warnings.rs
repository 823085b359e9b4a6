//! The warnings of a comparison: launches that did not measure, one warning per reason.

use super::{command_name, CompareRound};

/// Every launch that did not measure, grouped by its outcome and message (in the order each
/// reason first occurs): `B, C in round 1 did not measure (crash: ...); no ratio for them
/// there`, or `B in rounds 1, 2; C in round 1 did not measure (...)` where their rounds differ.
pub fn not_measured(rounds: &[CompareRound]) -> Vec<String> {
    let mut reasons: Vec<Reason> = Vec::new();
    for (i, r) in rounds.iter().enumerate() {
        for l in r.launches.iter().filter(|l| l.gen_tps.is_none()) {
            let (outcome, message) = (l.outcome.as_str(), l.message.as_str());
            let at = match reasons
                .iter()
                .position(|x| x.outcome == outcome && x.message == message)
            {
                Some(at) => at,
                None => {
                    reasons.push(Reason {
                        outcome,
                        message,
                        failed: Vec::new(),
                    });
                    reasons.len() - 1
                }
            };
            let failed = &mut reasons[at].failed;
            match failed.iter_mut().find(|f| f.command == l.command) {
                Some(f) if f.rounds.last() != Some(&(i + 1)) => f.rounds.push(i + 1),
                Some(_) => {}
                None => failed.push(Failed {
                    command: l.command,
                    rounds: vec![i + 1],
                }),
            }
        }
    }
    reasons.into_iter().map(Reason::said).collect()
}

/// One outcome and message, and the launches that ended so.
struct Reason<'a> {
    outcome: &'a str,
    message: &'a str,
    failed: Vec<Failed>,
}

/// A command and the rounds (from 1) where it did not measure for one reason.
struct Failed {
    command: usize,
    rounds: Vec<usize>,
}

impl Reason<'_> {
    fn said(mut self) -> String {
        self.failed.sort_by_key(|f| f.command);
        // Commands that failed in the same rounds share a clause, in command order.
        let mut clauses: Vec<(Vec<String>, &[usize])> = Vec::new();
        for f in &self.failed {
            let name = command_name(f.command);
            match clauses.iter_mut().find(|(_, r)| *r == f.rounds.as_slice()) {
                Some((names, _)) => names.push(name),
                None => clauses.push((vec![name], &f.rounds)),
            }
        }
        let said: Vec<String> = clauses
            .iter()
            .map(|(names, rs)| {
                let each: Vec<String> = rs.iter().map(usize::to_string).collect();
                let round = if rs.len() == 1 { "round" } else { "rounds" };
                format!("{} in {round} {}", names.join(", "), each.join(", "))
            })
            .collect();
        let them = if self.failed.len() == 1 { "it" } else { "them" };
        format!(
            "{} did not measure ({}: {}); no ratio for {them} there",
            said.join("; "),
            self.outcome,
            self.message
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::CompareLaunch;

    fn launch(command: usize, ok: bool, message: &str) -> CompareLaunch {
        CompareLaunch {
            command,
            trial_id: 0,
            outcome: if ok { "ok" } else { "crash" }.into(),
            gen_tps: ok.then_some(10.0),
            prompt_tps: ok.then_some(100.0),
            peak_vram_mib: None,
            shapes: Vec::new(),
            peak_vram_per_gpu_mib: Vec::new(),
            message: message.into(),
            replay: None,
            drafts: None,
        }
    }

    fn round(launches: Vec<CompareLaunch>) -> CompareRound {
        CompareRound {
            order: launches.iter().map(|l| l.command).collect(),
            launches,
        }
    }

    #[test]
    fn one_warning_per_reason_naming_each_command_and_its_rounds() {
        let rounds = vec![
            round(vec![
                launch(0, true, ""),
                launch(1, false, "fault"),
                launch(2, false, "fault"),
                launch(3, false, "other"),
            ]),
            round(vec![
                launch(3, true, ""),
                launch(2, true, ""),
                launch(1, false, "fault"),
                launch(0, true, ""),
            ]),
            round(vec![
                launch(0, true, ""),
                launch(1, true, ""),
                launch(2, false, "fault"),
                launch(3, true, ""),
            ]),
        ];
        assert_eq!(
            not_measured(&rounds),
            vec![
                "B in rounds 1, 2; C in rounds 1, 3 did not measure (crash: fault); \
                 no ratio for them there"
                    .to_string(),
                "D in round 1 did not measure (crash: other); no ratio for it there".to_string(),
            ]
        );
        let same = vec![round(vec![
            launch(0, true, ""),
            launch(2, false, "fault"),
            launch(1, false, "fault"),
        ])];
        assert_eq!(
            not_measured(&same),
            vec!["B, C in round 1 did not measure (crash: fault); no ratio for them there"]
        );
    }
}
