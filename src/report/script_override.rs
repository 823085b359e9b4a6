//! `launch.sh`'s note when an argument passed on to llama-server replaces a tuned flag
//! (`./launch.sh -c 65536` -> `note: -c 65536 overrides the tuned -c 32768`). The argument is
//! still passed on (llama-server takes the last value given); the note says which tuned value
//! it replaces, so a slower server is never a surprise. Kept apart from `script.rs`, whose
//! template holds one line that calls [`CHECK`].

use crate::config::LaunchConfig;
use crate::engine::LaunchArgs;
use crate::engine::FLAG_SPELLINGS;
use crate::escape::shell_quote;

/// A bash function `tuned_flag FLAG`: prints the tuned flag and its value (`-c 32768`) when
/// FLAG, in any spelling llama-server takes, is one of the config's flags with a value;
/// fails otherwise. `-ot` is not listed: another rule adds to the tuned ones, it replaces none.
pub fn tuned_flag_function(cfg: &LaunchConfig) -> String {
    let args = cfg.server_args();
    let mut out = String::from(
        "# The tuned flag (and its value) that FLAG, in any spelling, would replace.\n\
         tuned_flag() {\n  case $1 in\n",
    );
    let mut i = 0;
    while i + 1 < args.len() {
        let (flag, value) = (&args[i], &args[i + 1]);
        // A flag is followed by its value, which never starts with '-'; `--no-op-offload`,
        // `-kvu` and `-no-kvu` take none.
        if !flag.starts_with('-') || value.starts_with('-') {
            i += 1;
            continue;
        }
        i += 2;
        if flag == crate::engine::of(cfg.engine).spelling(crate::engine::Flag::OverrideTensor) {
            continue;
        }
        let Some(spellings) = FLAG_SPELLINGS.iter().find(|s| s[0] == flag) else {
            continue;
        };
        let shown = format!("{flag} {}", shell_quote(value));
        out.push_str(&format!(
            "    {}) printf '%s\\n' {} ;;\n",
            spellings.join("|"),
            shell_quote(&shown)
        ));
    }
    out.push_str("    *) return 1 ;;\n  esac\n}\n");
    out
}

/// After the arguments are read: one note on stderr per passed-on argument that replaces a
/// tuned flag (`-c 65536`, `--ctx-size 65536`; llama-server takes no `--flag=value`).
pub const CHECK: &str = r#"for ((i = 0; i < ${#extra[@]}; i++)); do
  if tuned=$(tuned_flag "${extra[$i]}"); then
    next=${extra[$((i + 1))]:-}
    say "note: ${extra[$i]}${next:+ $next} overrides the tuned $tuned"
  fi
done
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::KvType;

    #[test]
    fn every_tuned_flag_with_a_value_is_listed_in_all_its_spellings() {
        let cfg = LaunchConfig {
            threads: Some(4),
            batch: Some(512),
            ubatch: Some(128),
            cache_type_k: KvType::Q8_0,
            op_offload: false,
            ..LaunchConfig::baseline(32768)
        };
        let f = tuned_flag_function(&cfg);
        assert!(
            f.contains("    -c|--ctx-size) printf '%s\\n' '-c 32768' ;;\n"),
            "{f}"
        );
        assert!(
            f.contains("    -t|--threads) printf '%s\\n' '-t 4' ;;\n"),
            "{f}"
        );
        assert!(
            f.contains("    -ub|--ubatch-size) printf '%s\\n' '-ub 128' ;;\n"),
            "{f}"
        );
        assert!(
            f.contains("-ctk|--cache-type-k) printf '%s\\n' '-ctk q8_0'"),
            "{f}"
        );
        assert!(!f.contains("-ngl"), "not a tuned flag here: {f}");
        assert!(!f.contains("op-offload"), "{f}");
    }
}
