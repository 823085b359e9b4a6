//! `launch.sh --record FILE`: the server moves to a local port and `qtune record` listens
//! where it would have, writing what clients send to FILE (see [`crate::traffic`]). Kept apart
//! from `script.rs` so that the launch script's own template stays one piece: it holds two
//! markers that [`splice`] replaces with the blocks below.

use crate::escape::shell_quote;

const SETUP_MARK: &str = "__RECORD_SETUP__";
const START_MARK: &str = "__RECORD_START__\n";

/// The script's default qtune (this one) for `--record`.
pub fn defaults() -> String {
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "qtune".into());
    format!("DEFAULT_QTUNE={}", shell_quote(&exe))
}

/// Before the server's URL is worked out: with `--record`, find qtune, keep the address the
/// user asked for as the proxy's, and give the server 127.0.0.1 and another port.
const SETUP: &str = r#"LISTEN=""
if [[ -n $RECORD ]]; then
  QTUNE=${QTUNE_BIN:-$DEFAULT_QTUNE}
  if [[ ! -x $QTUNE ]]; then QTUNE=$(command -v qtune || true); fi
  if [[ -z $QTUNE ]]; then
    say "--record needs qtune: not found at $DEFAULT_QTUNE nor on PATH (set QTUNE_BIN)"
    exit 2
  fi
  SERVER_PORT=${QTUNE_SERVER_PORT:-$((PORT + 1))}
  if ! [[ $SERVER_PORT =~ ^[0-9]{1,5}$ ]] || (( 10#$SERVER_PORT < 1 || 10#$SERVER_PORT > 65535 || 10#$SERVER_PORT == PORT )); then
    say "--record: the server's port (QTUNE_SERVER_PORT) must be 1 to 65535 and not $PORT, not '$SERVER_PORT'"
    exit 2
  fi
  case $HOST in
    \[*) LISTEN="$HOST:$PORT" ;;
    *:*) LISTEN="[$HOST]:$PORT" ;;
    *) LISTEN="$HOST:$PORT" ;;
  esac
  # The address clients are given: the proxy's (a wildcard listen is reached on loopback).
  case $HOST in
    0.0.0.0) CLIENT_URL="http://127.0.0.1:$PORT" ;;
    ::|'[::]') CLIENT_URL="http://[::1]:$PORT" ;;
    *) CLIENT_URL="http://$LISTEN" ;;
  esac
  HOST=127.0.0.1
  PORT=$((10#$SERVER_PORT))
fi
"#;

/// Once the server is ready: start the proxy in front of it; either one ending stops both
/// (the proxy first, so it finishes its trace).
const START: &str = r#"if [[ -n $RECORD ]]; then
  "$QTUNE" record --upstream "$URL" --listen "$LISTEN" --out "$RECORD" &
  record_pid=$!
  # Ready once the proxy answers (it forwards /health to the server): the URL clients copy is
  # the proxy's, never the server's, which records nothing.
  if command -v curl >/dev/null 2>&1; then
    deadline=$((SECONDS + 30))
    until curl -fsS --max-time 2 "$CLIENT_URL/health" >/dev/null 2>&1; do
      if ! kill -0 "$record_pid" 2>/dev/null || (( SECONDS >= deadline )); then break; fi
      sleep 0.2
    done
  fi
  say "ready: $CLIENT_URL (OpenAI-compatible API at $CLIENT_URL/v1), recording what clients send to $RECORD; the server behind it, $URL, records nothing"
  rc=0
  wait -n || rc=$?
  if ! kill -0 "$record_pid" 2>/dev/null; then
    say "qtune record stopped (status $rc): stopping llama-server"
  fi
  stop "$rc"
fi
"#;

/// The launch script with the `--record` blocks in place of its markers.
pub fn splice(script: String) -> String {
    debug_assert!(script.contains(SETUP_MARK) && script.contains(START_MARK));
    script
        .replacen(SETUP_MARK, SETUP, 1)
        .replacen(START_MARK, START, 1)
}
