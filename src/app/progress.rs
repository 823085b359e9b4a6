//! The tune's progress on stderr: a spinner while a trial runs and one line per finished trial
//! (plain lines when stderr is not a terminal).

use crate::config::LaunchConfig;
use crate::search::progress::role_word;
use crate::trial::TrialRole;
use indicatif::{ProgressBar, ProgressStyle};
use std::time::Duration;

pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    pub fn new() -> Self {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                .expect("static template"),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress { bar }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl crate::search::Watch for Progress {
    fn starting(&self, config: &LaunchConfig, role: TrialRole) {
        self.bar
            .set_message(format!("{} trial: {}", role_word(role), config.label()));
    }

    fn finished(&self, line: &str) {
        if self.bar.is_hidden() {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }
}
