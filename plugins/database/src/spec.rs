//! The `Database` custom resource as this plugin reads it. Kept in sync with
//! `crds/databases.example.com.yaml`, which enforces the same rules at the API
//! server; the plugin checks again because it may run on any input (`render`).

use kubeplug_sdk::{Error, Meta};
use serde::Deserialize;

/// A `Database` object.
#[derive(Debug, Clone, Deserialize)]
pub struct Database {
    pub metadata: Meta,
    pub spec: DatabaseSpec,
}

/// `Database.spec`.
#[derive(Debug, Clone, Deserialize)]
pub struct DatabaseSpec {
    pub engine: Engine,
    /// `x.y.z`.
    pub version: String,
    #[serde(default = "one")]
    pub replicas: i32,
}

fn one() -> i32 {
    1
}

pub const MIN_REPLICAS: i32 = 1;
pub const MAX_REPLICAS: i32 = 10;

/// The database engines this plugin knows how to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    Mysql,
    Postgresql,
    Mongodb,
}

impl Engine {
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Mysql => "mysql",
            Engine::Postgresql => "postgresql",
            Engine::Mongodb => "mongodb",
        }
    }

    /// The official image's repository (Docker Hub calls PostgreSQL `postgres`).
    pub fn image(self) -> &'static str {
        match self {
            Engine::Mysql => "mysql",
            Engine::Postgresql => "postgres",
            Engine::Mongodb => "mongo",
        }
    }

    pub fn port(self) -> i32 {
        match self {
            Engine::Mysql => 3306,
            Engine::Postgresql => 5432,
            Engine::Mongodb => 27017,
        }
    }

    pub fn data_dir(self) -> &'static str {
        match self {
            Engine::Mysql => "/var/lib/mysql",
            Engine::Postgresql => "/var/lib/postgresql/data",
            Engine::Mongodb => "/data/db",
        }
    }

    /// The admin user the image creates.
    pub fn user(self) -> &'static str {
        match self {
            Engine::Mysql => "root",
            Engine::Postgresql => "postgres",
            Engine::Mongodb => "admin",
        }
    }

    /// Environment variables the image reads its credentials from, with the
    /// Secret key each comes from.
    pub fn credential_env(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Engine::Mysql => &[("MYSQL_ROOT_PASSWORD", "password")],
            Engine::Postgresql => &[
                ("POSTGRES_USER", "username"),
                ("POSTGRES_PASSWORD", "password"),
            ],
            Engine::Mongodb => &[
                ("MONGO_INITDB_ROOT_USERNAME", "username"),
                ("MONGO_INITDB_ROOT_PASSWORD", "password"),
            ],
        }
    }
}

impl DatabaseSpec {
    pub fn validate(&self) -> Result<(), Error> {
        if !(MIN_REPLICAS..=MAX_REPLICAS).contains(&self.replicas) {
            return Err(Error::InvalidInput(format!(
                "spec.replicas must be between {MIN_REPLICAS} and {MAX_REPLICAS}, got {}",
                self.replicas
            )));
        }
        let parts: Vec<&str> = self.version.split('.').collect();
        let numeric = |p: &&str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
        if parts.len() != 3 || !parts.iter().all(numeric) {
            return Err(Error::InvalidInput(format!(
                "spec.version must look like x.y.z, got {:?}",
                self.version
            )));
        }
        Ok(())
    }
}
