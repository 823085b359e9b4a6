//! Reading an answer as it passes through the proxy: the server's `timings` (and usage) from
//! a JSON answer or from a stream's server-sent events, one event at a time, holding at most
//! [`MAX_KEPT`] bytes.

use super::trace::Timings;

/// The most of one answer kept to read its timings (a non-streamed answer) or one event of a
/// stream.
pub const MAX_KEPT: usize = 16 << 20;

/// What the proxy read from an answer as it passed.
#[derive(Default)]
pub(super) struct Observed {
    pub status: Option<u16>,
    pub first_byte_ms: Option<f64>,
    pub timings: Option<Timings>,
    pub n_generated: Option<u64>,
    /// The prompt's length as the server counted it (cached and read), where its answer says:
    /// the recorded prompt must have as many tokens.
    pub prompt_counted: Option<u64>,
    /// A non-streamed answer, kept up to MAX_KEPT; or the current unfinished line of a stream.
    kept: Vec<u8>,
    pub overflow: bool,
}

impl Observed {
    fn take_json(&mut self, v: &serde_json::Value) {
        if let Some(n) = [&v["usage"], &v["response"]["usage"], &v["message"]["usage"]]
            .iter()
            .find_map(|u| prompt_count(u))
        {
            self.prompt_counted = Some(n);
        }
        if let Some(t) = timings_of(&v["timings"]) {
            self.timings = Some(t);
            self.n_generated = Some(t.predicted_n);
            self.prompt_counted = t.cache_n.checked_add(t.prompt_n);
        } else if self.timings.is_none() {
            // The usage of a chat answer, of an Anthropic message (its stream's last
            // `message_delta` counts them all; `message_start` says 0) or of a Responses answer
            // (its stream's `response.completed`): the latest wins.
            let usage = [&v["usage"], &v["response"]["usage"]];
            if let Some(n) = usage.iter().find_map(|u| {
                u["completion_tokens"]
                    .as_u64()
                    .or_else(|| u["output_tokens"].as_u64())
            }) {
                self.n_generated = Some(n);
            }
        }
    }

    pub fn feed(&mut self, stream: bool, chunk: &[u8]) {
        if self.overflow {
            return;
        }
        if !stream {
            if self.kept.len() + chunk.len() > MAX_KEPT {
                self.overflow = true;
                self.kept = Vec::new();
            } else {
                self.kept.extend_from_slice(chunk);
            }
            return;
        }
        // Server-sent events: read each complete line as it passes.
        let mut rest = chunk;
        while let Some(nl) = rest.iter().position(|b| *b == b'\n') {
            self.kept.extend_from_slice(&rest[..nl]);
            let line = std::mem::take(&mut self.kept);
            self.event_line(&line);
            rest = &rest[nl + 1..];
        }
        if self.kept.len() + rest.len() > MAX_KEPT {
            self.overflow = true;
            self.kept = Vec::new();
        } else {
            self.kept.extend_from_slice(rest);
        }
    }

    fn event_line(&mut self, line: &[u8]) {
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        // Only the events that carry timings or usage are parsed (the last ones).
        let has = |needle: &[u8]| data.windows(needle.len()).any(|w| w == needle);
        if !has(b"\"timings\"") && !has(b"\"usage\"") {
            return;
        }
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data.trim_ascii()) {
            self.take_json(&v);
        }
    }

    pub fn end(&mut self, stream: bool) {
        if stream {
            let line = std::mem::take(&mut self.kept);
            self.event_line(&line);
        } else if !self.overflow {
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&self.kept) {
                self.take_json(&v);
            }
            self.kept = Vec::new();
        }
    }
}

/// The prompt's whole length in a usage object: a chat answer's `prompt_tokens`; a Responses
/// answer's `input_tokens`; an Anthropic message's `input_tokens` (the tokens read) plus its
/// `cache_read_input_tokens`.
fn prompt_count(u: &serde_json::Value) -> Option<u64> {
    if let Some(n) = u["prompt_tokens"].as_u64() {
        return Some(n);
    }
    let input = u["input_tokens"].as_u64()?;
    match u["cache_read_input_tokens"].as_u64() {
        Some(c) => input.checked_add(c),
        None => Some(input),
    }
}

fn timings_of(v: &serde_json::Value) -> Option<Timings> {
    Some(Timings {
        cache_n: v["cache_n"].as_u64()?,
        prompt_n: v["prompt_n"].as_u64()?,
        prompt_ms: v["prompt_ms"].as_f64()?,
        predicted_n: v["predicted_n"].as_u64()?,
        predicted_ms: v["predicted_ms"].as_f64()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_events_are_read_across_chunk_boundaries() {
        let mut o = Observed::default();
        let events = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n\
                      data: {\"choices\":[],\"usage\":{\"completion_tokens\":7},\"timings\":{\"cache_n\":3,\"prompt_n\":5,\"prompt_ms\":1.5,\"predicted_n\":7,\"predicted_ms\":9.0}}\n\n\
                      data: [DONE]\n\n";
        for c in events.as_bytes().chunks(7) {
            o.feed(true, c);
        }
        o.end(true);
        let t = o.timings.unwrap();
        assert_eq!((t.cache_n, t.prompt_n, t.predicted_n), (3, 5, 7));
        assert_eq!(o.n_generated, Some(7));
    }

    #[test]
    fn a_huge_event_is_dropped_not_kept() {
        let mut o = Observed::default();
        o.feed(true, b"data: ");
        for _ in 0..(MAX_KEPT / (1 << 20) + 2) {
            o.feed(true, &vec![b'x'; 1 << 20]);
        }
        assert!(o.overflow && o.kept.is_empty());
    }
}
