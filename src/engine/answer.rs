//! The answer dialect: what a server's `/completion` answer says about one request (its
//! `timings`), read alike from every engine. ik_llama.cpp's answer has no `cache_n`; the
//! prompt's tokens it did not read are the cached ones.

use serde::Deserialize;

/// What the server reported for one request (`timings` in the `/completion` response).
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct RequestTimings {
    /// Prompt tokens taken from the prompt cache. ik_llama.cpp's timings have no `cache_n`
    /// (read as -1 here, then as its `tokens_evaluated` less `prompt_n`).
    #[serde(default = "cache_n_absent")]
    pub cache_n: i64,
    pub prompt_n: i64,
    pub prompt_ms: f64,
    pub prompt_per_second: f64,
    pub predicted_n: i64,
    pub predicted_ms: f64,
    pub predicted_per_second: f64,
    /// Speculative decoding's tokens drafted, and of these accepted, for this request: the
    /// pinned llama-server's `timings.draft_n` and `timings.draft_n_accepted`, present only
    /// where it drafted something (server-common.cpp, `server_slot_stats::to_json`).
    #[serde(default)]
    pub draft_n: Option<i64>,
    #[serde(default)]
    pub draft_n_accepted: Option<i64>,
}

fn cache_n_absent() -> i64 {
    -1
}

#[derive(Deserialize)]
pub struct CompletionResponse {
    pub timings: RequestTimings,
    /// The whole prompt's tokens (ik_llama.cpp's answer; llama.cpp's has it too).
    #[serde(default)]
    tokens_evaluated: Option<i64>,
    /// The answer's token ids (asked for with `return_tokens`); a reply without a readable
    /// list has none.
    #[serde(default, deserialize_with = "token_ids")]
    tokens: Option<Vec<u32>>,
}

/// A list of token ids, or None for anything else (a server's odd reply is not an error).
fn token_ids<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<u32>>, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    Ok(v.as_array().and_then(|a| {
        a.iter()
            .map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()))
            .collect()
    }))
}

impl CompletionResponse {
    /// The timings, with `cache_n` where the server left it out: the prompt's tokens it did
    /// not read (ik_llama.cpp), else none.
    pub fn into_timings(self) -> RequestTimings {
        self.into_parts().0
    }

    /// [`Self::into_timings`], and the answer's token ids where the reply has them.
    pub fn into_parts(self) -> (RequestTimings, Option<Vec<u32>>) {
        let mut t = self.timings;
        if t.cache_n < 0 {
            t.cache_n = self
                .tokens_evaluated
                .map_or(0, |all| (all - t.prompt_n).max(0));
        }
        (t, self.tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_parse_from_a_real_response() {
        // From the pinned CPU llama-server with SmolLM2.
        let body = r#"{"content":"x","timings":{"cache_n":0,"prompt_n":10,"prompt_ms":66.707,
            "prompt_per_token_ms":6.67,"prompt_per_second":149.909,"predicted_n":8,
            "predicted_ms":84.779,"predicted_per_token_ms":12.11,"predicted_per_second":82.567}}"#;
        let r: CompletionResponse = serde_json::from_str(body).unwrap();
        assert_eq!(r.timings.predicted_n, 8);
        assert!((r.timings.prompt_per_second - 149.909).abs() < 1e-9);
        assert_eq!(r.into_timings().cache_n, 0);
    }

    /// ik_llama.cpp's answer has no `cache_n`: the prompt's tokens it did not read are the
    /// cached ones (a second request of the same 401-token prompt read 1).
    #[test]
    fn cached_tokens_of_an_ik_llama_answer() {
        let body = r#"{"content":"x","tokens_evaluated":401,"tokens_cached":405,
            "timings":{"prompt_n":1,"prompt_ms":1.451,"prompt_per_token_ms":1.451,
            "prompt_per_second":689.18,"predicted_n":4,"predicted_ms":4.24,
            "predicted_per_token_ms":1.06,"predicted_per_second":943.40,"n_ctx":2048,"n_past":405}}"#;
        let r: CompletionResponse = serde_json::from_str(body).unwrap();
        let t = r.into_timings();
        assert_eq!((t.cache_n, t.prompt_n), (400, 1));
    }
}
