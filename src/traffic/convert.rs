//! The request bodies of the Anthropic Messages API (`/v1/messages`, Claude Code's) and the
//! OpenAI Responses API (`/v1/responses`) as the chat-completions body the pinned
//! llama-server turns them into before its chat template applies
//! (`server_chat_convert_anthropic_to_oai` and `server_chat_convert_responses_to_chatcmpl` in
//! tools/server/server-chat.cpp, b11434), step for step and key for key (a template that
//! prints a tool as JSON prints its keys in their order: [`super::ordered`]). The recorder
//! then renders it through the same `/apply-template` route as a chat request, and checks its
//! length against the server's own count in its answer (`proxy::finish`): a conversion that
//! drifts from the server's is never recorded as the prompt.

use super::ordered::J;

/// The text of the Claude Code billing header's `cch=XXXXX;` stamp replaced by `fffff`, as
/// the server does (it changes on every request and would defeat the prompt cache).
fn normalize_billing_header(text: &str) -> String {
    const HEAD: &str = "x-anthropic-billing-header:";
    if !text.starts_with(HEAD) {
        return text.to_string();
    }
    let Some(at) = text[HEAD.len()..].find("cch=").map(|i| i + HEAD.len() + 4) else {
        return text.to_string();
    };
    if at + 5 < text.len() && text.as_bytes()[at + 5] == b';' && text.is_char_boundary(at + 5) {
        format!("{}fffff{}", &text[..at], &text[at + 5..])
    } else {
        text.to_string()
    }
}

/// An Anthropic image source as a chat `image_url` part.
fn image_part(source: &J) -> Option<J> {
    let url = match source.at("type").as_str() {
        Some("base64") => format!(
            "data:{};base64,{}",
            source.at("media_type").as_str().unwrap_or("image/jpeg"),
            source.at("data").str_or_empty()
        ),
        Some("url") => source.at("url").str_or_empty().to_string(),
        _ => return None,
    };
    Some(J::obj([
        ("type", J::s("image_url")),
        ("image_url", J::obj([("url", J::Str(url))])),
    ]))
}

/// The chat body of an Anthropic Messages request, as the pinned llama-server converts it.
pub fn anthropic_to_chat(body: &J) -> Result<J, String> {
    let mut messages: Vec<J> = Vec::new();
    let system = body.at("system");
    if !system.is_null() {
        let text = match system {
            J::Str(s) => normalize_billing_header(s),
            J::Arr(blocks) => blocks
                .iter()
                .filter(|b| b.at("type").as_str() == Some("text"))
                .map(|b| normalize_billing_header(b.at("text").str_or_empty()))
                .collect(),
            _ => String::new(),
        };
        messages.push(J::obj([
            ("role", J::s("system")),
            ("content", J::Str(text)),
        ]));
    }
    if !body.has("messages") {
        return Err("the request has no messages".into());
    }
    for msg in body.at("messages").as_array().unwrap_or_default() {
        let role = msg.at("role").str_or_empty();
        if !msg.has("content") {
            if role != "assistant" {
                messages.push(msg.clone());
            }
            continue;
        }
        let Some(blocks) = msg.at("content").as_array() else {
            messages.push(msg.clone());
            continue;
        };
        let (mut parts, mut calls, mut results) = (Vec::new(), Vec::new(), Vec::new());
        let mut reasoning = String::new();
        for block in blocks {
            match block.at("type").str_or_empty() {
                "text" => parts.push(block.clone()),
                "thinking" => reasoning.push_str(block.at("thinking").str_or_empty()),
                "image" => parts.extend(image_part(block.at("source"))),
                "tool_use" => {
                    let input = match block.at("input") {
                        J::Null => J::Obj(Vec::new()),
                        v => v.clone(),
                    };
                    calls.push(J::obj([
                        ("id", J::s(block.at("id").str_or_empty())),
                        ("type", J::s("function")),
                        (
                            "function",
                            J::obj([
                                ("name", J::s(block.at("name").str_or_empty())),
                                ("arguments", J::Str(input.dump())),
                            ]),
                        ),
                    ]));
                }
                "tool_result" => {
                    let id = J::s(block.at("tool_use_id").str_or_empty());
                    let content = match block.at("content") {
                        J::Str(s) => J::s(s),
                        J::Arr(items) => {
                            let mut text = String::new();
                            let mut content_parts = Vec::new();
                            let mut images = false;
                            for c in items {
                                match c.at("type").str_or_empty() {
                                    "text" => {
                                        let t = c.at("text").str_or_empty();
                                        text.push_str(t);
                                        content_parts.push(J::obj([
                                            ("type", J::s("text")),
                                            ("text", J::s(t)),
                                        ]));
                                    }
                                    "image" => {
                                        images = true;
                                        content_parts.extend(image_part(c.at("source")));
                                    }
                                    _ => {}
                                }
                            }
                            if images {
                                J::Arr(content_parts)
                            } else {
                                J::Str(text)
                            }
                        }
                        _ => J::s(""),
                    };
                    results.push(J::obj([
                        ("role", J::s("tool")),
                        ("tool_call_id", id),
                        ("content", content),
                    ]));
                }
                _ => {}
            }
        }
        if !parts.is_empty() || !calls.is_empty() || !reasoning.is_empty() {
            let mut m = J::obj([("role", J::s(role))]);
            if !parts.is_empty() {
                m.set("content", J::Arr(parts));
            } else {
                m.set("content", J::s(""));
            }
            if !calls.is_empty() {
                m.set("tool_calls", J::Arr(calls));
            }
            if !reasoning.is_empty() {
                m.set("reasoning_content", J::Str(reasoning));
            }
            messages.push(m);
        }
        messages.extend(results);
    }
    let mut out = J::obj([("messages", J::Arr(messages))]);
    if let Some(tools) = body.at("tools").as_array() {
        let tools = tools
            .iter()
            .map(|t| {
                let params = if t.has("input_schema") {
                    t.at("input_schema").clone()
                } else {
                    J::Obj(Vec::new())
                };
                J::obj([
                    ("type", J::s("function")),
                    (
                        "function",
                        J::obj([
                            ("name", J::s(t.at("name").str_or_empty())),
                            ("description", J::s(t.at("description").str_or_empty())),
                            ("parameters", params),
                        ]),
                    ),
                ])
            })
            .collect();
        out.set("tools", J::Arr(tools));
    }
    if let J::Obj(_) = body.at("tool_choice") {
        match body.at("tool_choice").at("type").str_or_empty() {
            "auto" => out.set("tool_choice", J::s("auto")),
            "any" | "tool" => out.set("tool_choice", J::s("required")),
            _ => {}
        }
    }
    if body.has("stop_sequences") {
        out.set("stop", body.at("stop_sequences").clone());
    }
    if body.has("max_tokens") {
        out.set("max_tokens", body.at("max_tokens").clone());
    } else {
        out.set("max_tokens", J::Num(4096.into()));
    }
    for key in [
        "temperature",
        "top_p",
        "top_k",
        "stream",
        "chat_template_kwargs",
    ] {
        if body.has(key) {
            out.set(key, body.at(key).clone());
        }
    }
    let thinking = body.at("thinking");
    if thinking.at("type").as_str() == Some("enabled") {
        let budget = match thinking.at("budget_tokens") {
            J::Num(n) => J::Num(n.clone()),
            _ => J::Num(10000.into()),
        };
        out.set("thinking_budget_tokens", budget);
    }
    if let Some(user) = body.at("metadata").at("user_id").as_str() {
        if !user.is_empty() {
            out.set("__metadata_user_id", J::s(user));
        }
    }
    Ok(out)
}

fn bad(why: &str) -> String {
    format!("the server refuses it: {why}")
}

/// The chat body of an OpenAI Responses request, as the pinned llama-server converts it.
pub fn responses_to_chat(body: &J) -> Result<J, String> {
    if !body.has("input") {
        return Err(bad("'input' is required"));
    }
    if !body.at("previous_response_id").str_or_empty().is_empty() {
        return Err(bad("llama.cpp does not support 'previous_response_id'"));
    }
    let mut out = body.clone();
    out.remove("input");
    let mut messages: Vec<J> = Vec::new();
    if body.has("instructions") {
        let text = body.at("instructions").str_or_empty();
        messages.push(J::obj([("role", J::s("system")), ("content", J::s(text))]));
        out.remove("instructions");
    }
    let is_str = |j: &J, k: &str| j.at(k).as_str().is_some();
    let is_arr = |j: &J, k: &str| j.at(k).as_array().is_some();
    match body.at("input") {
        J::Str(s) => messages.push(J::obj([("role", J::s("user")), ("content", J::s(s))])),
        J::Arr(items) => {
            for item in items {
                let mut item = item.clone();
                let merge_prev = messages
                    .last()
                    .is_some_and(|m| m.at("role").as_str() == Some("assistant"));
                if let Some(text) = item.at("content").as_str().map(J::s) {
                    item.set(
                        "content",
                        J::Arr(vec![J::obj([("text", text), ("type", J::s("input_text"))])]),
                    );
                }
                let role = item.at("role").as_str().map(str::to_string);
                let kind = item.at("type").as_str().map(str::to_string);
                if is_arr(&item, "content")
                    && matches!(role.as_deref(), Some("user" | "system" | "developer"))
                {
                    let mut content = Vec::new();
                    for part in item.at("content").as_array().unwrap_or_default() {
                        match part.at("type").str_or_empty() {
                            "input_text" => {
                                if !part.has("text") {
                                    return Err(bad("'Input text' requires 'text'"));
                                }
                                content.push(J::obj([
                                    ("text", part.at("text").clone()),
                                    ("type", J::s("text")),
                                ]));
                            }
                            "input_image" => {
                                if !part.has("image_url") {
                                    return Err(bad("'image_url' is required"));
                                }
                                content.push(J::obj([
                                    ("image_url", J::obj([("url", part.at("image_url").clone())])),
                                    ("type", J::s("image_url")),
                                ]));
                            }
                            _ => return Err(bad("an input part of an unsupported type")),
                        }
                    }
                    item.remove("type");
                    item.remove("status");
                    item.set("content", J::Arr(content));
                    messages.push(item);
                } else if role.as_deref() == Some("assistant") && kind.as_deref() == Some("message")
                {
                    let mut content = Vec::new();
                    for part in item.at("content").as_array().unwrap_or_default() {
                        match part.at("type").str_or_empty() {
                            "output_text" | "input_text" => {
                                if !is_str(part, "text") {
                                    return Err(bad("'Output text' requires 'text'"));
                                }
                                content.push(J::obj([
                                    ("text", part.at("text").clone()),
                                    ("type", J::s("text")),
                                ]));
                            }
                            "refusal" => {
                                if !is_str(part, "refusal") {
                                    return Err(bad("'Refusal' requires 'refusal'"));
                                }
                                content.push(J::obj([
                                    ("refusal", part.at("refusal").clone()),
                                    ("type", J::s("refusal")),
                                ]));
                            }
                            _ => return Err(bad("an output part of an unsupported type")),
                        }
                    }
                    if merge_prev {
                        let prev = messages.last_mut().expect("merge_prev: one is there");
                        let mut all = prev.at("content").as_array().unwrap_or_default().to_vec();
                        all.extend(content);
                        prev.set("content", J::Arr(all));
                    } else {
                        item.remove("status");
                        item.remove("type");
                        item.set("content", J::Arr(content));
                        messages.push(item);
                    }
                } else if is_str(&item, "arguments")
                    && is_str(&item, "call_id")
                    && is_str(&item, "name")
                    && kind.as_deref() == Some("function_call")
                {
                    let call = J::obj([
                        (
                            "function",
                            J::obj([
                                ("arguments", item.at("arguments").clone()),
                                ("name", item.at("name").clone()),
                            ]),
                        ),
                        ("id", item.at("call_id").clone()),
                        ("type", J::s("function")),
                    ]);
                    if merge_prev {
                        let prev = messages.last_mut().expect("merge_prev: one is there");
                        let mut calls = prev
                            .at("tool_calls")
                            .as_array()
                            .unwrap_or_default()
                            .to_vec();
                        calls.push(call);
                        prev.set("tool_calls", J::Arr(calls));
                    } else {
                        messages.push(J::obj([
                            ("role", J::s("assistant")),
                            ("tool_calls", J::Arr(vec![call])),
                        ]));
                    }
                } else if is_str(&item, "call_id")
                    && (is_str(&item, "output") || is_arr(&item, "output"))
                    && kind.as_deref() == Some("function_call_output")
                {
                    let content = match item.at("output") {
                        J::Arr(outputs) => {
                            let mut converted = Vec::new();
                            for o in outputs {
                                let mut o = o.clone();
                                match o.at("type").as_str() {
                                    Some("input_text") => o.set("type", J::s("text")),
                                    Some("input_image") => {
                                        if !o.has("image_url") {
                                            return Err(bad("'image_url' is required"));
                                        }
                                        let url = o.at("image_url").clone();
                                        o.set("type", J::s("image_url"));
                                        o.set("image_url", J::obj([("url", url)]));
                                    }
                                    _ => return Err(bad("a tool output of an unsupported type")),
                                }
                                converted.push(o);
                            }
                            J::Arr(converted)
                        }
                        other => other.clone(),
                    };
                    messages.push(J::obj([
                        ("content", content),
                        ("role", J::s("tool")),
                        ("tool_call_id", item.at("call_id").clone()),
                    ]));
                } else if is_arr(&item, "summary") && kind.as_deref() == Some("reasoning") {
                    let text = item
                        .at("content")
                        .as_array()
                        .and_then(|c| c.first())
                        .and_then(|c| c.at("text").as_str())
                        .ok_or_else(|| bad("a reasoning item without its text"))?;
                    if merge_prev {
                        let prev = messages.last_mut().expect("merge_prev: one is there");
                        prev.set("reasoning_content", J::s(text));
                    } else {
                        messages.push(J::obj([
                            ("role", J::s("assistant")),
                            ("content", J::Arr(Vec::new())),
                            ("reasoning_content", J::s(text)),
                        ]));
                    }
                } else {
                    return Err(bad("an input item of an unknown type"));
                }
            }
        }
        _ => return Err(bad("'input' must be a string or array of objects")),
    }
    out.set("messages", J::Arr(messages));
    if body.has("tools") {
        let Some(tools) = body.at("tools").as_array() else {
            return Err(bad("'tools' must be an array of objects"));
        };
        let tools: Vec<J> = tools
            .iter()
            .filter(|t| t.at("type").as_str() == Some("function"))
            .map(|t| {
                let mut f = t.clone();
                f.remove("type");
                if !f.has("strict") {
                    f.set("strict", J::Bool(true));
                }
                J::obj([("type", J::s("function")), ("function", f)])
            })
            .collect();
        out.remove("tools");
        if !tools.is_empty() {
            out.set("tools", J::Arr(tools));
        }
    }
    if body.has("max_output_tokens") {
        out.remove("max_output_tokens");
        out.set("max_tokens", body.at("max_output_tokens").clone());
    }
    if body.has("reasoning") {
        let effort = body.at("reasoning");
        if effort.has("effort") {
            out.set("reasoning_effort", effort.at("effort").clone());
        }
        out.remove("reasoning");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn j(text: &str) -> J {
        serde_json::from_str(text).unwrap()
    }

    /// Claude Code's shape: system as blocks (its billing header first), a tool, a tool_use
    /// answered by a tool_result.
    #[test]
    fn an_anthropic_body_becomes_the_chat_body_the_server_renders() {
        let body = j(r#"{"model":"m","max_tokens":64,"stream":true,
            "system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2; cch=a5145;"},
                      {"type":"text","text":"You are terse."}],
            "tools":[{"name":"read","description":"Read a file",
                      "input_schema":{"type":"object","properties":{"path":{"type":"string"}}}}],
            "messages":[
              {"role":"user","content":"Open a.txt"},
              {"role":"assistant","content":[{"type":"text","text":"Reading."},
                {"type":"tool_use","id":"t1","name":"read","input":{"path":"a.txt","z":1,"a":2}}]},
              {"role":"user","content":[
                {"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"hello"}]},
                {"type":"text","text":"Summarise it."}]}]}"#);
        let c = anthropic_to_chat(&body).unwrap();
        let m = c.at("messages").as_array().unwrap();
        assert_eq!(
            m[0].at("content").as_str(),
            Some("x-anthropic-billing-header: cc_version=2; cch=fffff;You are terse.")
        );
        assert_eq!(m[1].at("content").as_str(), Some("Open a.txt"));
        let call = &m[2].at("tool_calls").as_array().unwrap()[0];
        // The arguments keep the client's key order.
        assert_eq!(
            call.at("function").at("arguments").as_str(),
            Some(r#"{"path":"a.txt","z":1,"a":2}"#)
        );
        assert_eq!(
            m[3].at("content").as_array().unwrap()[0]
                .at("text")
                .as_str(),
            Some("Summarise it.")
        );
        assert_eq!(
            m[4].dump(),
            r#"{"role":"tool","tool_call_id":"t1","content":"hello"}"#
        );
        assert_eq!(
            c.at("tools").dump(),
            r#"[{"type":"function","function":{"name":"read","description":"Read a file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}]"#
        );
        assert!(anthropic_to_chat(&j(r#"{"system":"x"}"#)).is_err());
    }

    #[test]
    fn a_responses_body_becomes_a_chat_body() {
        let body = j(r#"{"instructions":"Be terse.","max_output_tokens":8,
            "input":[
              {"role":"user","content":[{"type":"input_text","text":"Open a.txt"}]},
              {"type":"function_call","call_id":"c1","name":"read","arguments":"{\"path\":\"a.txt\"}"},
              {"type":"function_call_output","call_id":"c1","output":"hello"}],
            "tools":[{"type":"function","name":"read","parameters":{"type":"object"}}]}"#);
        let c = responses_to_chat(&body).unwrap();
        let m = c.at("messages").as_array().unwrap();
        assert_eq!(m[0].at("role").as_str(), Some("system"));
        assert_eq!(
            m[1].dump(),
            r#"{"role":"user","content":[{"text":"Open a.txt","type":"text"}]}"#
        );
        assert_eq!(m[2].at("tool_calls").as_array().unwrap().len(), 1);
        assert_eq!(m[3].at("role").as_str(), Some("tool"));
        assert_eq!(
            c.at("tools").dump(),
            r#"[{"type":"function","function":{"name":"read","parameters":{"type":"object"},"strict":true}}]"#
        );
        assert_eq!(c.at("max_tokens").dump(), "8");
        assert!(!c.has("input") && !c.has("instructions"));
        let s = responses_to_chat(&j(r#"{"input":"hi"}"#)).unwrap();
        assert_eq!(
            s.at("messages").dump(),
            r#"[{"role":"user","content":"hi"}]"#
        );
        assert!(responses_to_chat(&j(r#"{"input":"hi","previous_response_id":"r"}"#)).is_err());
    }
}
