//! The profile store: `profiles/` in the current directory. Import never replaces a
//! different profile; lookups go by path, file stem or name.

use super::*;

/// Validate `file` and store it as `profiles_dir/<name>.yaml` (canonical YAML), atomically and
/// without replacing a different profile. Returns the stored path and whether it was new.
pub fn import_into(file: &Path, profiles_dir: &Path) -> Result<(PathBuf, bool)> {
    let p = load_profile(file)?;
    let yaml = to_yaml(&p)?;
    let dest = profiles_dir.join(format!("{}.yaml", file_stem(&p.name)));
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

/// Find a profile by file path, by file stem in `profiles_dir`, or by its `name`.
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
    for (path, r) in load_dir(profiles_dir) {
        if let Ok(p) = r {
            if p.name == name {
                return Ok((path, p));
            }
        }
    }
    bail!(
        "no profile '{}' (not a file, not in ./{}; see 'qtune profile list')",
        one_line(name),
        profiles_dir.display()
    )
}
