//! Can this server draft with the model's own multi-token-prediction layer (`--spec-type
//! draft-mtp`, issue 54)? Three things must hold, and where one does not, one line says which:
//! the build offers `draft-mtp` (its `--help` lists it among `--spec-type`'s values), it has an
//! MTP graph for the model's architecture, and the GGUF carries the layer
//! (`<arch>.nextn_predict_layers` > 0, as llama.cpp's converter writes it for Qwen3.5).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The architectures qtune places whose MTP layer the pinned llama.cpp (b11434) drafts with:
/// the models with an `LLM_GRAPH_TYPE_DECODER_MTP` graph (`src/models/*.cpp`).
pub const MTP_ARCHS: &[&str] = &["qwen35", "qwen35moe", "qwen3next", "deepseek2"];

/// Does this `--help` text offer `draft-mtp` as a `--spec-type`?
pub fn help_offers_mtp(help: &str) -> bool {
    help.lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with("--spec-type"))
        .any(|l| {
            l.split(|c: char| c.is_whitespace() || c == ',')
                .any(|w| w == "draft-mtp")
        })
}

/// Asks `server --help` whether it offers `draft-mtp`; a server that cannot be run offers
/// nothing.
pub fn server_offers_mtp(server: &Path) -> bool {
    crate::engine::binary::run_captured(Command::new(server).arg("--help"), Duration::from_secs(30))
        .is_ok_and(|(_, help)| help_offers_mtp(&help))
}

/// Why `--spec-type draft-mtp` cannot run on this model with this build, in one line; None
/// where it can. `arch` and `mtp_layers`: the GGUF's architecture and its
/// `nextn_predict_layers` (the model stage reads them; the engine sits below it);
/// `build_offers`: [`server_offers_mtp`] of the server.
pub fn unavailable(arch: &str, mtp_layers: u32, build_offers: bool) -> Option<String> {
    if !build_offers {
        return Some(
            "MTP: not tried, this llama-server cannot draft with it (its --help lists no draft-mtp for --spec-type; qtune server build makes the pinned one, which can)"
                .to_string(),
        );
    }
    if !MTP_ARCHS.contains(&arch) {
        return Some(format!(
            "MTP: not tried, the pinned llama.cpp drafts with an MTP layer only for {} models, not {}",
            MTP_ARCHS.join(", "),
            arch
        ));
    }
    if mtp_layers == 0 {
        return Some(format!(
            "MTP: not tried, this GGUF has no MTP layer ({}.nextn_predict_layers = 0; a convert without --no-mtp keeps it)",
            arch
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_help_line_of_the_pinned_build_offers_mtp_and_an_older_one_does_not() {
        let pinned = "--spec-type none,draft-simple,draft-eagle3,draft-mtp,draft-dflash,ngram-mod\n        comma-separated list";
        assert!(help_offers_mtp(pinned));
        let older = "--spec-type [none|ngram-cache|ngram-simple|ngram-map-k|ngram-mod]\n  --mtp  download it";
        assert!(!help_offers_mtp(older));
        assert!(!help_offers_mtp(
            "the draft-mtp type is mentioned elsewhere"
        ));
    }

    #[test]
    fn each_missing_piece_is_named_in_one_line() {
        struct L {
            arch: String,
            mtp_layers: u32,
        }
        let mut l = L {
            arch: "qwen3moe".into(),
            mtp_layers: 0,
        };
        let line = |l: &L, b| unavailable(&l.arch, l.mtp_layers, b).unwrap_or_default();
        assert!(line(&l, false).contains("lists no draft-mtp"));
        assert!(
            line(&l, true).contains("only for qwen35, qwen35moe"),
            "{}",
            line(&l, true)
        );
        assert!(line(&l, true).ends_with("not qwen3moe"));
        l.arch = "qwen35moe".into();
        assert_eq!(
            line(&l, true),
            "MTP: not tried, this GGUF has no MTP layer (qwen35moe.nextn_predict_layers = 0; a convert without --no-mtp keeps it)"
        );
        l.mtp_layers = 1;
        assert_eq!(unavailable(&l.arch, l.mtp_layers, true), None);
        for b in [false, true] {
            l.mtp_layers = 0;
            assert!(!line(&l, b).contains('\n'));
        }
    }
}
