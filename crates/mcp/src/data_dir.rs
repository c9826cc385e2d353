//! Where the gateway keeps state between runs of the process (upstream
//! OAuth tokens today): `$CODEMODE_DATA_DIR`, else
//! `$XDG_DATA_HOME/codemode`, else `$HOME/.local/share/codemode`.

use std::path::PathBuf;

/// The data directory, or why there is none (no variable to derive it
/// from). It is not created here.
pub fn data_dir() -> Result<PathBuf, String> {
    data_dir_from(&|name| std::env::var_os(name).filter(|v| !v.is_empty()))
}

fn data_dir_from(env: &dyn Fn(&str) -> Option<std::ffi::OsString>) -> Result<PathBuf, String> {
    if let Some(dir) = env("CODEMODE_DATA_DIR") {
        return Ok(PathBuf::from(dir));
    }
    if let Some(dir) = env("XDG_DATA_HOME") {
        return Ok(PathBuf::from(dir).join("codemode"));
    }
    if let Some(home) = env("HOME") {
        return Ok(PathBuf::from(home).join(".local/share/codemode"));
    }
    Err("no data directory: set CODEMODE_DATA_DIR (or XDG_DATA_HOME or HOME)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_variable_set_decides() {
        let vars = |set: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                set.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            }
        };
        let all = vars(&[
            ("CODEMODE_DATA_DIR", "/d"),
            ("XDG_DATA_HOME", "/x"),
            ("HOME", "/h"),
        ]);
        assert_eq!(data_dir_from(&all), Ok(PathBuf::from("/d")));
        let xdg = vars(&[("XDG_DATA_HOME", "/x"), ("HOME", "/h")]);
        assert_eq!(data_dir_from(&xdg), Ok(PathBuf::from("/x/codemode")));
        let home = vars(&[("HOME", "/h")]);
        assert_eq!(
            data_dir_from(&home),
            Ok(PathBuf::from("/h/.local/share/codemode"))
        );
        let none = vars(&[]);
        assert!(
            data_dir_from(&none)
                .unwrap_err()
                .contains("CODEMODE_DATA_DIR")
        );
    }
}
