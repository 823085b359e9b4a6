//! Reading an answer as it passes through the proxy: the server's `timings` (and usage) from
//! a JSON answer or from a stream's server-sent events, one event at a time, holding at most
//! [`MAX_KEPT`] bytes, and all answers together at most [`MAX_KEPT_ALL`].

use super::trace::Timings;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The most of one answer kept to read its timings (a non-streamed answer) or one event of a
/// stream.
pub const MAX_KEPT: usize = 16 << 20;

/// The most kept for all answers at once (200 answers of 15 MiB each took 1.3 GB when the
/// bound was per answer only). An answer that finds no room is forwarded all the same, and
/// recorded without its timings.
pub const MAX_KEPT_ALL: usize = 128 << 20;

/// The room left for kept answers, bytes, shared by all of them.
#[derive(Clone)]
pub(super) struct Room(Arc<AtomicUsize>);

impl Room {
    pub fn new(bytes: usize) -> Room {
        Room(Arc::new(AtomicUsize::new(bytes)))
    }

    fn take(&self, n: usize) -> bool {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                left.checked_sub(n)
            })
            .is_ok()
    }

    fn give(&self, n: usize) {
        self.0.fetch_add(n, Ordering::AcqRel);
    }
}

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
    /// The generated text read so far (issue 54: tokenized after the answer ends), at most
    /// [`super::answers::MAX_TEXT`] bytes; `None` once past that.
    pub text: Option<String>,
    /// A non-streamed answer, kept up to MAX_KEPT; or the current unfinished line of a stream.
    kept: Vec<u8>,
    pub overflow: bool,
    /// The room shared with the other answers (None: only MAX_KEPT bounds this one).
    room: Option<Room>,
    /// What `kept` took from `room` (its capacity).
    taken: usize,
    /// What `text` took from `room`: the answers' texts share its bound.
    text_taken: usize,
}

impl Drop for Observed {
    fn drop(&mut self) {
        self.free();
        if let Some(r) = &self.room {
            r.give(self.text_taken);
        }
    }
}

impl Observed {
    /// An answer read within `room`, shared with the other answers.
    pub fn within(room: &Room) -> Observed {
        Observed {
            status: None,
            first_byte_ms: None,
            timings: None,
            n_generated: None,
            prompt_counted: None,
            text: Some(String::new()),
            kept: Vec::new(),
            overflow: false,
            room: Some(room.clone()),
            taken: 0,
            text_taken: 0,
        }
    }

    /// Let go of what is kept, and give its room back.
    fn free(&mut self) {
        self.kept = Vec::new();
        if let Some(r) = &self.room {
            r.give(self.taken);
        }
        self.taken = 0;
    }

    /// Keep `more` after what is kept, if there is room for it (this answer's and all of
    /// theirs); else nothing more is kept.
    fn keep(&mut self, more: &[u8]) -> bool {
        let len = self.kept.len() + more.len();
        if len > MAX_KEPT {
            return false;
        }
        if len > self.taken {
            // Grown as a Vec grows (doubling), each step taken from the shared room first.
            let cap = (self.taken * 2).clamp(len, MAX_KEPT);
            if let Some(r) = &self.room {
                if !r.take(cap - self.taken) {
                    return false;
                }
            }
            self.kept.reserve_exact(cap - self.kept.len());
            self.taken = cap;
        }
        self.kept.extend_from_slice(more);
        true
    }

    fn overflowed(&mut self) {
        self.overflow = true;
        self.text = None;
        self.free();
    }

    fn take_json(&mut self, v: &serde_json::Value) {
        if let Some(text) = &mut self.text {
            let more = super::answers::text_of(v);
            let fits = text.len() + more.len() <= super::answers::MAX_TEXT
                && self.room.as_ref().is_none_or(|r| r.take(more.len()));
            if fits {
                text.push_str(&more);
                self.text_taken += more.len();
            } else {
                // Past its bound, or no room left: the answer is not tokenized.
                self.text = None;
                if let Some(r) = &self.room {
                    r.give(std::mem::take(&mut self.text_taken));
                }
            }
        }
        if let Some(n) = [&v["usage"], &v["response"]["usage"], &v["message"]["usage"]]
            .iter()
            .find_map(|u| prompt_count(u))
        {
            self.prompt_counted = Some(n);
        }
        if let Some(t) = timings_of(v) {
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
            if !self.keep(chunk) {
                self.overflowed();
            }
            return;
        }
        // Server-sent events: read each complete line as it passes.
        let mut rest = chunk;
        while let Some(nl) = rest.iter().position(|b| *b == b'\n') {
            if self.kept.is_empty() {
                self.event_line(&rest[..nl]);
            } else {
                if !self.keep(&rest[..nl]) {
                    self.overflowed();
                    return;
                }
                let line = std::mem::take(&mut self.kept);
                self.event_line(&line);
                self.free();
            }
            rest = &rest[nl + 1..];
        }
        if !self.keep(rest) {
            self.overflowed();
        }
    }

    fn event_line(&mut self, line: &[u8]) {
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        // Every event is read: its text, and the last ones' timings or usage.
        if data.trim_ascii() == b"[DONE]" {
            return;
        }
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data.trim_ascii()) {
            self.take_json(&v);
        }
    }

    pub fn end(&mut self, stream: bool) {
        let kept = std::mem::take(&mut self.kept);
        if stream {
            self.event_line(&kept);
        } else if !self.overflow {
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&kept) {
                self.take_json(&v);
            }
        }
        drop(kept);
        self.free();
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

/// An answer's (or a stream event's) `timings`. ik_llama.cpp's have no `cache_n`: the
/// prompt's tokens it did not read are the cached ones, its `tokens_evaluated` less
/// `prompt_n` (as [`crate::engine::answer`] reads a replayed request's).
fn timings_of(answer: &serde_json::Value) -> Option<Timings> {
    let v = &answer["timings"];
    let prompt_n = v["prompt_n"].as_u64()?;
    let cache_n = v["cache_n"].as_u64().or_else(|| {
        answer["tokens_evaluated"]
            .as_u64()
            .map(|all| all.saturating_sub(prompt_n))
    })?;
    Some(Timings {
        cache_n,
        prompt_n,
        prompt_ms: v["prompt_ms"].as_f64()?,
        predicted_n: v["predicted_n"].as_u64()?,
        predicted_ms: v["predicted_ms"].as_f64()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ik_llama.cpp's `/completion` answer (its real body, from the CPU server: a second
    /// request of the same 401-token prompt read 1 token) has no `cache_n`: the recorder
    /// counts the cached tokens from its `tokens_evaluated`, and the prompt whole.
    #[test]
    fn an_ik_llama_answer_keeps_its_timings_and_cached_tokens() {
        let room = Room::new(1 << 20);
        let mut o = Observed::within(&room);
        let body = r#"{"content":"x","tokens_evaluated":401,"tokens_cached":405,
            "timings":{"prompt_n":1,"prompt_ms":1.451,"prompt_per_token_ms":1.451,
            "prompt_per_second":689.18,"predicted_n":4,"predicted_ms":4.24,
            "predicted_per_token_ms":1.06,"predicted_per_second":943.40,"n_ctx":2048,"n_past":405}}"#;
        o.feed(false, body.as_bytes());
        o.end(false);
        let t = o.timings.expect("ik's timings kept");
        assert_eq!((t.cache_n, t.prompt_n, t.predicted_n), (400, 1, 4));
        assert_eq!(o.prompt_counted, Some(401));
    }

    #[test]
    fn stream_events_are_read_across_chunk_boundaries() {
        let room = Room::new(1 << 20);
        let mut o = Observed::within(&room);
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
        // The answer's text (issue 54), held within the shared room until the answer goes.
        assert_eq!(o.text.as_deref(), Some("hi"));
        assert_eq!(room.0.load(Ordering::Acquire), (1 << 20) - 2);
        drop(o);
        assert_eq!(room.0.load(Ordering::Acquire), 1 << 20);
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

    /// A non-streamed answer of `mib` MiB whose timings are at its end.
    fn answer(mib: usize) -> Vec<u8> {
        let mut a = b"{\"content\":\"".to_vec();
        a.resize(mib << 20, b'x');
        a.extend_from_slice(b"\",\"timings\":{\"cache_n\":0,\"prompt_n\":5,\"prompt_ms\":1.0,\"predicted_n\":7,\"predicted_ms\":9.0}}");
        a
    }

    /// Issue 53: the bound holds over all answers at once, not per answer. With room for 32
    /// MiB, two 15 MiB answers read at once are kept and read; a third is forwarded unread
    /// (overflow), and the room comes back once an answer is done.
    #[test]
    fn answers_kept_at_once_share_one_bound() {
        let room = Room::new(32 << 20);
        let a = answer(15);
        let mut seen: Vec<Observed> = (0..3).map(|_| Observed::within(&room)).collect();
        for c in a.chunks(64 << 10) {
            for o in seen.iter_mut() {
                o.feed(false, c);
            }
        }
        let kept: usize = seen.iter().map(|o| o.kept.capacity()).sum();
        assert!(kept <= 32 << 20, "{kept} bytes kept");
        assert_eq!(seen.iter().filter(|o| o.overflow).count(), 1);
        for o in seen.iter_mut() {
            o.end(false);
        }
        assert_eq!(seen.iter().filter(|o| o.timings.is_some()).count(), 2);
        drop(seen);
        assert_eq!(
            room.0.load(Ordering::Acquire),
            32 << 20,
            "the room comes back"
        );
        // A stream's events hold room only while one is split across chunks.
        let mut s = Observed::within(&room);
        s.feed(
            true,
            b"data: {\"usage\":{\"completion_tokens\":3}}\n\ndata: {\"x\"",
        );
        assert!(room.0.load(Ordering::Acquire) < 32 << 20);
        s.feed(true, b":1}\n\n");
        assert_eq!(room.0.load(Ordering::Acquire), 32 << 20);
        s.end(true);
        assert_eq!(s.n_generated, Some(3));
    }
}
