//! Parsing: profile text and files (size-bounded, regular files only) into validated
//! profiles, and profiles back into the YAML qtune writes.

use super::*;

/// Make an error text safe for a terminal: one line, no control characters.
pub(crate) fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Parse and validate a profile from its text (`origin` names it in errors).
pub fn parse_profile(text: &str, origin: &str) -> Result<Profile> {
    crate::util::check_yaml_shape(text, crate::util::MAX_YAML_DEPTH)
        .map_err(|e| anyhow!("{origin} is not a valid profile: {e}"))?;
    for (i, line) in text.lines().enumerate() {
        if let Some(c) = line
            .chars()
            .find(|&c| c.is_control() && c != '\t' && c != '\r')
        {
            bail!(
                "{origin} is not a valid profile: line {} contains {}",
                i + 1,
                describe_char(c)
            );
        }
    }
    let p: Profile = serde_yaml::from_str(text).map_err(|e| {
        anyhow!(
            "{origin} is not a valid profile: {}",
            one_line(&e.to_string())
        )
    })?;
    validate(&p).map_err(|e| {
        anyhow!(
            "{origin} is not a valid profile: {}",
            one_line(&e.to_string())
        )
    })?;
    Ok(p)
}

/// Read, parse and validate a profile file: at most 1 MiB, UTF-8, known keys only, sane values.
pub fn load_profile(path: &Path) -> Result<Profile> {
    let shown = one_line(&path.display().to_string());
    use crate::util::BoundedReadError as E;
    let bytes = crate::util::read_bounded(path, MAX_PROFILE_BYTES).map_err(|e| match e {
        E::Directory => anyhow!("{shown} is a directory, not a profile file (give a .yaml file)"),
        E::NotRegular => anyhow!("{shown} is not a regular file"),
        E::TooLarge { size, .. } => anyhow!(
            "{shown} is {size} bytes; a profile is at most {MAX_PROFILE_BYTES} bytes (1 MiB)"
        ),
        E::Io(e) => anyhow!("cannot read profile {shown}: {e}"),
    })?;
    let text = String::from_utf8(bytes).map_err(|e| {
        anyhow!(
            "{shown} is not a valid profile: not UTF-8 text (byte {})",
            e.utf8_error().valid_up_to()
        )
    })?;
    parse_profile(&text, &shown)
}

/// The YAML qtune writes for a profile.
pub fn to_yaml(p: &Profile) -> Result<String> {
    Ok(format!(
        "# qtune profile (schema {SCHEMA_VERSION}). Import with: qtune profile import FILE\n{}",
        serde_yaml::to_string(p)?
    ))
}

/// A profile's slug, the name to type: lowercase, anything but `[a-z0-9._]` as '-', runs of
/// '-' folded, parenthesised asides dropped ("Qwen3.5-35B-A3B (qtune synthetic, random
/// weights) Q4_K_M" -> "qwen3.5-35b-a3b-q4_k_m").
pub fn slug(name: &str) -> String {
    let mut depth = 0u32;
    let mut kept = String::new();
    for c in name.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => kept.push(c),
            _ => {}
        }
    }
    if kept.trim().is_empty() {
        kept = name.to_string();
    }
    let mut out = String::new();
    for c in kept.chars().flat_map(char::to_lowercase) {
        let c = if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
            c
        } else {
            '-'
        };
        if c == '-' && (out.is_empty() || out.ends_with('-')) {
            continue;
        }
        out.push(c);
    }
    let t = out.trim_matches(|c| c == '-' || c == '.').to_string();
    if t.is_empty() {
        "profile".to_string()
    } else {
        t
    }
}

/// File name for a profile in `profiles/`: its name with anything but `[A-Za-z0-9._+-]` as '-'.
pub fn file_stem(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._+-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    let mut out = String::new();
    for c in s.chars() {
        if c == '-' && out.ends_with('-') {
            continue;
        }
        out.push(c);
    }
    let t = out.trim_matches(|c| c == '-' || c == '.').to_string();
    if t.is_empty() {
        "profile".to_string()
    } else {
        t
    }
}
