package main

// Engine is a database engine this plugin knows how to run, in the Rust
// plugin's order (which orders engineRegistries).
type Engine int

const (
	MySQL Engine = iota
	PostgreSQL
	MongoDB
)

var engines = []Engine{MySQL, PostgreSQL, MongoDB}

func engineNamed(name string) (Engine, bool) {
	for _, e := range engines {
		if e.String() == name {
			return e, true
		}
	}
	return 0, false
}

func (e Engine) String() string {
	return [...]string{"mysql", "postgresql", "mongodb"}[e]
}

// Image is the official image's repository (Docker Hub calls PostgreSQL
// `postgres`).
func (e Engine) Image() string { return [...]string{"mysql", "postgres", "mongo"}[e] }

// Port is the engine's port.
func (e Engine) Port() int32 { return [...]int32{3306, 5432, 27017}[e] }

// DataDir is where the image keeps its data.
func (e Engine) DataDir() string {
	return [...]string{"/var/lib/mysql", "/var/lib/postgresql/data", "/data/db"}[e]
}

// User is the admin user the image creates.
func (e Engine) User() string { return [...]string{"root", "postgres", "admin"}[e] }

// CredentialEnv are the environment variables the image reads its
// credentials from, with the Secret key each comes from.
func (e Engine) CredentialEnv() [][2]string {
	switch e {
	case MySQL:
		return [][2]string{{"MYSQL_ROOT_PASSWORD", "password"}}
	case PostgreSQL:
		return [][2]string{{"POSTGRES_USER", "username"}, {"POSTGRES_PASSWORD", "password"}}
	default:
		return [][2]string{{"MONGO_INITDB_ROOT_USERNAME", "username"}, {"MONGO_INITDB_ROOT_PASSWORD", "password"}}
	}
}
