package kubeplug

// Level is a log level, as the WIT's `level`.
type Level uint32

const (
	LevelTrace Level = iota
	LevelDebug
	LevelInfo
	LevelWarn
	LevelError
)

// Log sends a message with key/value fields (key, value, key, value...) to
// the host, which adds the plugin's name and the object being reconciled.
func Log(level Level, message string, fields ...string) {
	pairs := make([][2]string, 0, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		pairs = append(pairs, [2]string{fields[i], fields[i+1]})
	}
	hostLog(level, message, pairs)
}

// Debug logs at debug level.
func Debug(message string, fields ...string) { Log(LevelDebug, message, fields...) }

// Info logs at info level.
func Info(message string, fields ...string) { Log(LevelInfo, message, fields...) }

// Warn logs at warn level.
func Warn(message string, fields ...string) { Log(LevelWarn, message, fields...) }

// ErrorLog logs at error level. The host adds a call's last error line to
// the report when the call traps (where a recovered panic's message goes).
func ErrorLog(message string, fields ...string) { Log(LevelError, message, fields...) }
