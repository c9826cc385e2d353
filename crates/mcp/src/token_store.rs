//! Upstream OAuth tokens on disk: one file per server,
//! `<data dir>/oauth/<server>.json`, readable by its owner only (0600 in a
//! 0700 directory), written whole through a temporary file and a rename so
//! a reader never sees half a token. The file names the upstream URL it was
//! got for: a config whose server now points elsewhere does not send the
//! old server's token there. A lock file next to it keeps two processes
//! (gateways, `codemode login`) from refreshing at once, which would burn a
//! rotating refresh token.

use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use rmcp::transport::auth::{
    AuthError, CredentialRefreshGuard, CredentialStore, StoredCredentials,
};
use serde::{Deserialize, Serialize};

/// The token file of one upstream.
#[derive(Debug, Clone)]
pub(crate) struct TokenFile {
    path: PathBuf,
    url: String,
}

#[derive(Serialize, Deserialize)]
struct Contents {
    url: String,
    credentials: StoredCredentials,
    /// Scopes the server refused a call for (403 `insufficient_scope`)
    /// that the stored token lacks: the next `codemode login` asks for
    /// them on top of what it had.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    wanted_scopes: Vec<String>,
}

impl TokenFile {
    /// The token file of `server` (reached at `url`) in `data_dir`.
    pub(crate) fn new(data_dir: &Path, server: &str, url: &str) -> TokenFile {
        // Server names are checked (no `/`, no whitespace), but keep the
        // file name to a safe alphabet anyway.
        let file: String = server
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let file = if file.starts_with('.') {
            format!("_{file}")
        } else {
            file
        };
        TokenFile {
            path: data_dir.join("oauth").join(format!("{file}.json")),
            url: url.to_owned(),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self) -> Result<Option<StoredCredentials>, String> {
        Ok(self.contents()?.map(|contents| contents.credentials))
    }

    /// The file's contents when it holds a token for this URL.
    fn contents(&self) -> Result<Option<Contents>, String> {
        let text = match fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("reading {}: {e}", self.path.display())),
        };
        let contents: Contents = serde_json::from_str(&text).map_err(|e| {
            format!(
                "{} is not a token file ({e}); delete it and log in again",
                self.path.display()
            )
        })?;
        Ok((contents.url == self.url).then_some(contents))
    }

    /// Scopes a call was refused for that the stored token lacks (see
    /// [`TokenFile::want_scopes`]); empty when none or no token.
    pub(crate) fn wanted_scopes(&self) -> Vec<String> {
        self.contents()
            .ok()
            .flatten()
            .map(|contents| contents.wanted_scopes)
            .unwrap_or_default()
    }

    /// The scopes the stored token was granted (or, when the server did
    /// not say, requested with).
    pub(crate) fn granted_scopes(&self) -> Vec<String> {
        self.contents()
            .ok()
            .flatten()
            .map(|contents| contents.credentials.granted_scopes)
            .unwrap_or_default()
    }

    /// Records scopes the server asked for that the stored token lacks, for
    /// the next `codemode login`. Nothing happens without a stored token.
    pub(crate) fn want_scopes(&self, scopes: &[String]) -> Result<(), String> {
        let _lock = self.lock()?;
        let Some(mut contents) = self.contents()? else {
            return Ok(());
        };
        for scope in scopes {
            if !contents.wanted_scopes.contains(scope) {
                contents.wanted_scopes.push(scope.clone());
            }
        }
        self.write_contents(&contents)
    }

    /// Forgets the wanted scopes (a new login asked for them).
    pub(crate) fn clear_wanted_scopes(&self) -> Result<(), String> {
        let _lock = self.lock()?;
        match self.contents()? {
            Some(mut contents) if !contents.wanted_scopes.is_empty() => {
                contents.wanted_scopes.clear();
                self.write_contents(&contents)
            }
            _ => Ok(()),
        }
    }

    /// Writes a new token; the scopes wanted for the next login stay.
    fn write(&self, credentials: StoredCredentials) -> Result<(), String> {
        let wanted_scopes = self.wanted_scopes();
        self.write_contents(&Contents {
            url: self.url.clone(),
            credentials,
            wanted_scopes,
        })
    }

    fn write_contents(&self, contents: &Contents) -> Result<(), String> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let text = serde_json::to_vec_pretty(contents)
            .map_err(|e| format!("encoding the token file: {e}"))?;
        let temporary = self
            .path
            .with_extension(format!("json.{}.tmp", std::process::id()));
        let written = (|| {
            let mut file = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&temporary)?;
            file.write_all(&text)?;
            file.sync_all()?;
            fs::rename(&temporary, &self.path)
        })();
        written.map_err(|e| {
            let _ = fs::remove_file(&temporary);
            format!("writing {}: {e}", self.path.display())
        })
    }

    fn lock(&self) -> Result<File, String> {
        let lock_path = self.path.with_extension("lock");
        if let Some(dir) = lock_path.parent() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|e| format!("opening {}: {e}", lock_path.display()))?;
        file.lock()
            .map_err(|e| format!("locking {}: {e}", lock_path.display()))?;
        Ok(file)
    }

    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(TokenFile) -> Result<T, String> + Send + 'static,
    ) -> Result<T, AuthError> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || work(this))
            .await
            .map_err(|e| AuthError::CredentialStoreError(e.to_string()))?
            .map_err(AuthError::CredentialStoreError)
    }
}

#[async_trait::async_trait]
impl CredentialStore for TokenFile {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        self.blocking(|file| file.read()).await
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        self.blocking(move |file| file.write(credentials)).await
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.blocking(|file| match fs::remove_file(&file.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(format!("removing {}: {e}", file.path.display()))
            }
            _ => Ok(()),
        })
        .await
    }

    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        // The lock is released when the file is closed (the guard dropped).
        let file = self.blocking(|file| file.lock()).await?;
        Ok(Some(CredentialRefreshGuard::new(file)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn credentials(client: &str) -> StoredCredentials {
        StoredCredentials::new(client.into(), None, vec!["read".into()], Some(1))
    }

    #[tokio::test]
    async fn a_saved_token_is_owner_only_and_bound_to_its_url() {
        let dir = std::env::temp_dir().join(format!("codemode-token-store-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let file = TokenFile::new(&dir, "crm", "https://crm.example.com/mcp");
        assert_eq!(file.load().await.unwrap().map(|c| c.client_id), None);
        file.save(credentials("client-1")).await.unwrap();
        let mode = fs::metadata(file.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the token file is owner-only");
        let dir_mode = fs::metadata(file.path().parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        assert_eq!(
            file.load().await.unwrap().map(|c| c.client_id).as_deref(),
            Some("client-1")
        );
        // The same server name pointing elsewhere does not get the token.
        let moved = TokenFile::new(&dir, "crm", "https://evil.example.com/mcp");
        assert!(moved.load().await.unwrap().is_none());
        // The refresh lock can be taken and is released with its guard.
        let guard = file.acquire_refresh_guard().await.unwrap();
        drop(guard);
        let _again = file.acquire_refresh_guard().await.unwrap();
        file.clear().await.unwrap();
        assert!(file.load().await.unwrap().is_none());
        file.clear().await.unwrap();
        // A damaged file is an error that says what to do, not a panic.
        fs::write(file.path(), "not json").unwrap();
        let err = file.load().await.unwrap_err().to_string();
        assert!(err.contains("log in again"), "{err}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn wanted_scopes_outlive_a_refresh_and_need_a_token() {
        let dir = tempfile::tempdir().unwrap();
        let file = TokenFile::new(dir.path(), "crm", "https://crm.example.com/mcp");
        // No token: nothing to widen, nothing written.
        file.want_scopes(&["write".into()]).unwrap();
        assert!(!file.path().exists());
        file.save(credentials("client-1")).await.unwrap();
        assert_eq!(file.granted_scopes(), vec!["read".to_owned()]);
        file.want_scopes(&["write".into(), "read".into()]).unwrap();
        file.want_scopes(&["write".into()]).unwrap();
        assert_eq!(
            file.wanted_scopes(),
            vec!["write".to_owned(), "read".to_owned()]
        );
        // A refreshed token (saved by the SDK) keeps them for the next login.
        file.save(credentials("client-1")).await.unwrap();
        assert_eq!(file.wanted_scopes().len(), 2);
        assert_eq!(
            file.load().await.unwrap().map(|c| c.client_id).as_deref(),
            Some("client-1")
        );
        file.clear_wanted_scopes().unwrap();
        assert!(file.wanted_scopes().is_empty());
        // Another URL's file does not lend its scopes.
        let moved = TokenFile::new(dir.path(), "crm", "https://evil.example.com/mcp");
        assert!(moved.wanted_scopes().is_empty() && moved.granted_scopes().is_empty());
    }

    #[test]
    fn file_names_stay_inside_the_oauth_directory() {
        let file = TokenFile::new(Path::new("/data"), "../x/..", "https://a/mcp");
        assert_eq!(file.path(), Path::new("/data/oauth/_.._x_...json"));
    }
}
