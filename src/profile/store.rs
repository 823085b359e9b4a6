//! The profile store: `profiles/` in the current directory. Import never replaces a
//! different profile; lookups go by path, file stem or name.

use super::*;

pub fn import_into(file: &Path, profiles_dir: &Path) -> Result<(PathBuf, bool)> {
    let p = load_profile(file)?;
    let yaml = to_yaml(&p)?;
    let dest = profiles_dir.join(format!("{}.yaml", file_stem(&p.name)));
    if let Ok(existing) = std::fs::read(&dest) {
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
    // Write a temporary file, then link it into place: linking never replaces an existing file.
    let tmp = profiles_dir.join(format!(".import-{}.tmp", std::process::id()));
    crate::util::write_atomic(&tmp, yaml.as_bytes())?;
    let linked = std::fs::hard_link(&tmp, &dest);
    let result = match linked {
        Ok(()) => Ok((dest.clone(), true)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(anyhow!(
            "{} appeared while importing: remove it or rename the profile first",
            dest.display()
        )),
        Err(_) => std::fs::rename(&tmp, &dest)
            .map(|_| (dest.clone(), true))
            .with_context(|| format!("cannot write {}", dest.display())),
    };
    let _ = std::fs::remove_file(&tmp);
    result
}

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
