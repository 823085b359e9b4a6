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
