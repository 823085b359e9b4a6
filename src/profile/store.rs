//! The profile store: `<data dir>/profiles/` ([`crate::util::profiles_dir`]), then the
//! profiles shipped with qtune (the repository's `profiles/`, compiled in). Import never
//! replaces a different profile; lookups go by path, slug (file stem) or name.

use super::*;

/// Validate `file` and store it as `profiles_dir/<name>.yaml` (canonical YAML), atomically and
/// without replacing a different profile. Returns the stored path and whether it was new.
pub fn import_into(file: &Path, profiles_dir: &Path) -> Result<(PathBuf, bool)> {
    let p = load_profile(file)?;
    let yaml = to_yaml(&p)?;
    let dest = profiles_dir.join(format!("{}.yaml", file_stem(&p.name)));
    // A link where the profile goes (even a dangling one) is named as one: never followed,
    // never replaced.
    if std::fs::symlink_metadata(&dest).is_ok_and(|m| m.file_type().is_symlink()) {
        bail!(
            "{} is a symbolic link: qtune stores a profile only as a real file and never writes through a link (remove the link, then import again)",
            dest.display()
        );
    }
    if let Ok(existing) = crate::util::read_bounded(&dest, MAX_PROFILE_BYTES) {
        if existing == yaml.as_bytes() {
            return Ok((dest, false));
        }
        bail!(
            "{} already exists with different content: remove it or rename the profile first",
            dest.display()
        );
    }
    std::fs::create_dir_all(profiles_dir)
        .with_context(|| format!("cannot create {}", profiles_dir.display()))?;
    // Never replaces a file that appeared meanwhile (tempfile's persist_noclobber).
    match crate::util::write_new_atomic(&dest, yaml.as_bytes()) {
        Ok(()) => Ok((dest, true)),
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::AlreadyExists)
            }) =>
        {
            Err(anyhow!(
                "{} appeared while importing: remove it or rename the profile first",
                dest.display()
            ))
        }
        Err(e) => Err(e),
    }
}

/// Every `*.yaml` / `*.yml` in `dir`, loaded (invalid ones with their error), sorted by path.
pub fn load_dir(dir: &Path) -> Vec<(PathBuf, Result<Profile>)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|e| e == "yaml" || e == "yml")
                && !p
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let r = load_profile(&p);
            (p, r)
        })
        .collect()
}

/// The profiles shipped with qtune: measured on the GPU machine, compiled in so an installed
/// qtune has them from any directory. Each is (slug, YAML).
pub const BUILT_IN: &[(&str, &str)] = &[
    (
        "qwen3-30b-a3b-q4_k_m-h200-16gib",
        include_str!("../../profiles/qwen3-30b-a3b-q4_k_m-h200-16gib.yaml"),
    ),
    (
        "qwen3.5-35b-a3b-q4_k_m-h200-16gib",
        include_str!("../../profiles/qwen3.5-35b-a3b-q4_k_m-h200-16gib.yaml"),
    ),
    (
        "qwen3.5-35b-a3b-q4_k_m-h200-24gib",
        include_str!("../../profiles/qwen3.5-35b-a3b-q4_k_m-h200-24gib.yaml"),
    ),
];

/// How a built-in profile is shown where a path would be: `built-in:<slug>`.
pub const BUILT_IN_PREFIX: &str = "built-in:";

/// The built-in profiles, parsed, as `(built-in:<slug>, profile)`.
pub fn built_in() -> Vec<(PathBuf, Result<Profile>)> {
    BUILT_IN
        .iter()
        .map(|(slug, yaml)| {
            let shown = format!("{BUILT_IN_PREFIX}{slug}");
            let r = parse_profile(yaml, &shown);
            (PathBuf::from(shown), r)
        })
        .collect()
}

/// The user's profiles in `profiles_dir`, then the built-in ones whose slug the user has not
/// taken: what `profile list` shows and `plan` chooses from.
pub fn load_all(profiles_dir: &Path) -> Vec<(PathBuf, Result<Profile>)> {
    let mut all = load_dir(profiles_dir);
    let taken: Vec<String> = all.iter().map(|(p, _)| slug_of_path(p)).collect();
    all.extend(
        built_in()
            .into_iter()
            .filter(|(p, _)| !taken.contains(&slug_of_path(p))),
    );
    all
}

/// The name `profile show` takes for a stored profile: its file stem (or built-in slug).
pub fn slug_of_path(path: &Path) -> String {
    let s = path.to_string_lossy();
    if let Some(slug) = s.strip_prefix(BUILT_IN_PREFIX) {
        return slug.to_string();
    }
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The profile a `--profile` (`plan`) or `--from-profile` (`tune`) argument names: a file, a
/// slug or a name, looked up by [`find_profile`] in the user's profiles folder. The one
/// resolver of both commands, so a name one takes the other takes too.
pub fn resolve_profile(arg: &Path) -> Result<(PathBuf, Profile)> {
    find_profile(&arg.to_string_lossy(), &crate::util::profiles_dir())
}

/// Find a profile by file path, by slug (file stem) in `profiles_dir` or among the built-in
/// profiles, or by its `name` (or the name's slug).
pub fn find_profile(name: &str, profiles_dir: &Path) -> Result<(PathBuf, Profile)> {
    let as_path = Path::new(name);
    if as_path.exists() {
        return Ok((as_path.to_path_buf(), load_profile(as_path)?));
    }
    for cand in [
        profiles_dir.join(format!("{name}.yaml")),
        profiles_dir.join(format!("{}.yaml", file_stem(name))),
    ] {
        if cand.is_file() {
            let p = load_profile(&cand)?;
            return Ok((cand, p));
        }
    }
    let wanted = slug(name);
    let all = load_all(profiles_dir);
    for (path, r) in &all {
        if slug_of_path(path) == name || slug_of_path(path) == wanted {
            return Ok((
                path.clone(),
                r.as_ref().map_err(|e| anyhow!("{e:#}"))?.clone(),
            ));
        }
    }
    for (path, r) in all {
        if let Ok(p) = r {
            if p.name == name || slug(&p.name) == wanted {
                return Ok((path, p));
            }
        }
    }
    bail!(
        "no profile '{}' (not a file, not in {} nor built in; see 'qtune profile list')",
        one_line(name),
        profiles_dir.display()
    )
}
