//! A tune the budget stopped before its race decided ([`BudgetStop`]): which budget, how far
//! the tune got, and the launches and minutes that let the race decide.

use super::*;

/// A number without a trailing `.0` (`5`, `2.5`).
fn trim_float(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// A tune the budget ended before its race decided: which budget, after how many launches,
/// what the race got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetStop {
    /// `launches` or `minutes`.
    pub by: String,
    pub launches: u32,
    pub budget_launches: u32,
    pub minutes: f64,
    pub budget_minutes: f64,
    /// Paired rounds the race measured, and where it stood.
    pub race_rounds: u32,
    pub race: String,
    /// The launch budget (a new total) that gives the race the rounds it says it needs to
    /// decide (None: no race ran, or a result written before qtune sized it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decide_launches: Option<u32>,
    /// The mean launch so far (seconds): what sizes the minutes those launches take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_launch_s: Option<f64>,
}

impl BudgetStop {
    /// The options and values that go on: the launches the race says it needs to decide
    /// (twice the launch budget where no race ran), and for a tune the minutes ended, the
    /// minutes those launches take at the mean launch so far (twice the minutes without one).
    pub fn extension(&self) -> Vec<(&'static str, String)> {
        let launches = self
            .decide_launches
            .filter(|&n| n > self.launches)
            .unwrap_or((self.budget_launches * 2).max(2));
        let mut out = Vec::new();
        if self.by != "minutes" || launches > self.budget_launches {
            out.push((
                "--budget-trials",
                launches.max(self.budget_launches).to_string(),
            ));
        }
        if self.by == "minutes" {
            let more = launches.saturating_sub(self.launches);
            let minutes = match self.mean_launch_s {
                Some(s) if self.decide_launches.is_some() => {
                    // Whole minutes, with one launch to spare.
                    (self.minutes + f64::from(more + 1) * s / 60.0)
                        .ceil()
                        .max(self.budget_minutes + 1.0)
                }
                _ => self.budget_minutes * 2.0,
            };
            out.push(("--budget-minutes", trim_float(minutes)));
        }
        out
    }

    /// For people: which budget, how far the tune got, and how to go on, then on a line of its
    /// own the exact command (`command` continues the tune; the extension is appended).
    pub fn line(&self, command: &str) -> String {
        let budget = if self.by == "minutes" {
            format!(
                "the minutes budget ({}) ended the tune after {} ({:.1} minutes)",
                crate::util::minutes(self.budget_minutes),
                if self.launches == 1 {
                    "1 launch".to_string()
                } else {
                    format!("{} launches", self.launches)
                },
                self.minutes
            )
        } else if self.launches < self.budget_launches {
            format!(
                "the launch budget left the race too few launches for a round ({} of {} made, \
                 {:.1} of {} minutes)",
                self.launches,
                self.budget_launches,
                self.minutes,
                trim_float(self.budget_minutes)
            )
        } else {
            format!(
                "the launch budget ended the tune after {} of {} launches ({:.1} of {} minutes)",
                self.launches,
                self.budget_launches,
                self.minutes,
                trim_float(self.budget_minutes)
            )
        };
        let rounds = match self.race_rounds {
            0 => "no paired round".to_string(),
            1 => "1 paired round".to_string(),
            n => format!("{n} paired rounds"),
        };
        let more: Vec<String> = self
            .extension()
            .into_iter()
            .map(|(flag, value)| format!("{flag} {value}"))
            .collect();
        let what = if self.decide_launches.is_some() {
            "to give the race the rounds it needs to decide"
        } else {
            "to go on with twice the budget"
        };
        format!(
            "stopped: {budget}; the race got {rounds}: {}; {what}:\n{command} {}",
            self.race,
            more.join(" ")
        )
    }
}
