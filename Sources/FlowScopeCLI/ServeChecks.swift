import FlowEvents
import FlowFetch
import FlowJSON
import FlowScopeServer
import FlowSim
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Every check `serve` makes before it binds, and nothing else: no directory is created, no file
/// written. `check-config` runs exactly these, so when it says ok, `serve` starts (unless the port is
/// taken). Each failure is one line naming the config file and key (or the flag), the resolved path
/// and what is wrong with it as it is: "not found", "not readable", "not a directory", ...
struct ServeChecks: Sendable {
    /// Where the certificate comes from.
    enum TLSSource: Sendable, Equatable {
        /// `--insecure-http`: none.
        case none
        /// `server.tls.cert` and `server.tls.key`, both checked (PEM, key matches).
        case configured(cert: String, key: String)
        /// Generated into this directory on first start (and renewed near expiry).
        case generated(directory: String)
    }

    /// The state directory serve creates once the checks pass.
    let stateDir: String
    let tls: TLSSource
    /// The dashboard: `server.webRoot` when configured, else the embedded one.
    let web: StaticFiles
    /// The demo backend to play, nil when demo traffic is off.
    let demo: Scenario?
    /// The population demo sessions are drawn from (`demo.population`), nil for the scenario demo.
    let population: Population?
    /// Where the demo's returning users keep their caches (`engine.cacheDir`, else `<stateDir>/cache`),
    /// created by serve; nil when demo traffic is off.
    let cacheDir: String?
    /// `engine.fallbackFile`, loaded.
    let fallback: FallbackFile?

    /// Runs the checks in order: state directory, TLS files, token, web root, sinks, demo scenario,
    /// the demo's cache directory, engine fallback file.
    init(config: FlowScopeConfig, overrides: ServeStack.Overrides) throws(ServeStack.StartError) {
        let file = config.file ?? FlowScopeConfig.embeddedName
        func fail(_ key: String, _ path: String, _ problem: String) -> ServeStack.StartError {
            ServeStack.StartError(description: "\(file): $.\(key): \(FlowScopeConfig.absolutePath(path)): \(problem)")
        }

        // The state directory: an existing writable directory, or one that can be created.
        let stateDir = overrides.stateDir ?? config.server.stateDir
        if let problem = Self.directoryProblem(stateDir) {
            if overrides.stateDir != nil {
                throw ServeStack.StartError(description: "--state-dir \(FlowScopeConfig.absolutePath(stateDir)): \(problem)")
            }
            if config.server.stateDir == FlowScopeConfig.Server().stateDir {
                throw ServeStack.StartError(description: "state directory \(FlowScopeConfig.absolutePath(stateDir)): \(problem) "
                                            + "(set server.stateDir or --state-dir)")
            }
            throw fail("server.stateDir", stateDir, problem)
        }
        self.stateDir = stateDir

        // TLS: a configured pair must exist, be PEM and match; a generated pair is read if present.
        if overrides.insecureHTTP {
            tls = .none
        } else if let cert = config.server.tlsCert, let key = config.server.tlsKey {
            if let problem = Self.fileProblem(cert) { throw fail("server.tls.cert", cert, problem) }
            if let problem = Self.fileProblem(key) { throw fail("server.tls.key", key, problem) }
            do throws(ServerFileError) {
                _ = try TLSMaterial.load(certPath: cert, keyPath: key)
            } catch {
                throw fail(error.path == key ? "server.tls.key" : "server.tls.cert", error.path, error.message)
            }
            tls = .configured(cert: cert, key: key)
        } else {
            let directory = config.server.tlsDir ?? stateDir + "/tls"
            let key = config.server.tlsDir != nil ? "server.tls.dir" : "server.stateDir"
            let certFile = directory + "/cert.pem", keyFile = directory + "/key.pem"
            let haveCert = FileManager.default.fileExists(atPath: certFile), haveKey = FileManager.default.fileExists(atPath: keyFile)
            if haveCert && haveKey {
                do throws(ServerFileError) {
                    _ = try TLSMaterial.load(certPath: certFile, keyPath: keyFile)
                } catch {
                    throw fail(key, error.path, error.message + " (remove cert.pem and key.pem to regenerate)")
                }
            } else if haveCert != haveKey {
                throw fail(key, haveCert ? keyFile : certFile, "not found while its pair exists; remove both files to regenerate")
            } else if let problem = Self.directoryProblem(directory) {
                throw fail(key, directory, problem)
            }
            tls = .generated(directory: directory)
        }

        // The token: a configured one is well formed; a generated one already on disk is readable.
        do throws(ServerFileError) {
            if let configured = config.server.token {
                _ = try AuthToken(configured: configured)
            } else if FileManager.default.fileExists(atPath: AuthToken.path(stateDir: stateDir)) {
                _ = try AuthToken.loadOrCreate(stateDir: stateDir)  // reads only: the file exists
            }
        } catch {
            throw config.server.token != nil
                ? ServeStack.StartError(description: "\(file): $.server.auth.token: \(error.message)")
                : fail("server.stateDir", error.path, error.message)
        }

        // The dashboard: a configured web root is a directory with an index.html, so GET / has a page.
        if let root = config.server.webRoot {
            if let problem = Self.directoryProblem(root, mustExist: true, writable: false) { throw fail("server.webRoot", root, problem) }
            do throws(ServerFileError) {
                web = try StaticFiles(root: root)
            } catch {
                throw fail("server.webRoot", root, error.message)
            }
            guard web.hasIndex else {
                throw fail("server.webRoot", root, "has no index.html, so GET / would have nothing to serve")
            }
        } else {
            web = StaticFiles(files: EmbeddedFiles.dashboard, label: "(embedded dashboard)")
        }

        // Sinks: every option valid (the registry's validation, which opens nothing), and every file
        // a sink writes in a directory that exists or can be created.
        do throws(JSONInputError) {
            try SinkRegistry.current.validateSinks(config.sinks, stateDirectory: stateDir, version: flowScopeVersion,
                                                   configDirectory: config.directory)
        } catch {
            throw ServeStack.StartError(description: error.inFile(file).description)
        }
        // Each file written by one sink only, and never the config file itself (an events file
        // appended to the config would leave a config that no longer parses).
        var writers: [String: String] = [:]
        if let configFile = config.file { writers[Self.identity(of: configFile)] = "the config file" }
        for (i, sink) in (config.sinks.arrayValue ?? []).enumerated() where sink["enabled"]?.boolValue != false {
            for (key, path) in Self.writtenFiles(sink, configDirectory: config.directory, stateDirectory: stateDir) {
                let identity = Self.identity(of: path)
                if let other = writers[identity] {
                    throw fail("sinks[\(i)].\(key)", path, "already written by \(other) (give each sink a file of its own)")
                }
                writers[identity] = "$.sinks[\(i)].\(key)"
                var st = stat()
                if stat(path, &st) == 0 {
                    if (st.st_mode & S_IFMT) == S_IFDIR { throw fail("sinks[\(i)].\(key)", path, "is a directory, expected a file") }
                    if access(path, W_OK) != 0 { throw fail("sinks[\(i)].\(key)", path, Self.describe(errno: errno)) }
                    if sink["type"]?.stringValue == "sqlite", let problem = Self.sqliteFileProblem(path, st) {
                        throw fail("sinks[\(i)].\(key)", path, problem)
                    }
                } else if let problem = Self.directoryProblem(FilePaths.directory(of: path)) {
                    let directory = FlowScopeConfig.absolutePath(FilePaths.directory(of: path))
                    throw fail("sinks[\(i)].\(key)", path, "directory \(directory): \(problem)")
                }
            }
        }

        // The demo backend: the population's, or the configured scenario file, or the embedded one, parses.
        population = config.demo.enabled && !overrides.noDemo ? config.demo.population : nil
        if let population {
            demo = population.demoScenario
        } else if config.demo.enabled && !overrides.noDemo {
            let text: String, name: String
            if let path = config.demo.scenario {
                if let problem = Self.fileProblem(path) { throw fail("demo.scenario", path, problem) }
                guard let data = FileManager.default.contents(atPath: path) else { throw fail("demo.scenario", path, "not readable") }
                text = String(decoding: data, as: UTF8.self)
                name = path
            } else {
                text = EmbeddedFiles.demoScenario
                name = EmbeddedFiles.demoScenarioName
            }
            do throws(JSONInputError) {
                demo = try Scenario.decode(text, file: name)
            } catch {
                throw ServeStack.StartError(description: "\(file): $.demo.scenario: \(error.description)")
            }
        } else {
            demo = nil
        }

        // The demo's cache directory: an existing writable directory, or one that can be created.
        if demo != nil {
            let directory = config.engine.cacheDir ?? stateDir + "/cache"
            if let problem = Self.directoryProblem(directory) { throw fail("engine.cacheDir", directory, problem) }
            cacheDir = directory
        } else {
            cacheDir = nil
        }

        // The engine's fallback file: loaded and checked as a client configured with it would
        // (fetch-rules.md, "The fallback file"), so a missing or broken one is found now.
        if let path = config.engine.fallbackFile {
            if let problem = Self.fileProblem(path) { throw fail("engine.fallbackFile", path, problem) }
            do throws(JSONInputError) {
                fallback = try FallbackFile.load(path: FlowScopeConfig.absolutePath(path))
            } catch {
                throw ServeStack.StartError(description: "\(file): $.engine.fallbackFile: \(error.description)")
            }
        } else {
            fallback = nil
        }
    }

    /// The files a sink entry writes, by option: `path` (any type; the config loader has resolved it
    /// already; for `jsonl` and `sqlite` its default in `stateDirectory` when absent) and the `otlp`
    /// sink's `file`, resolved against `configDirectory` as its factory resolves it.
    static func writtenFiles(_ sink: JSONValue, configDirectory: String?, stateDirectory: String) -> [(key: String, path: String)] {
        var files: [(key: String, path: String)] = []
        if let path = sink["path"]?.stringValue {
            files.append(("path", path))
        } else if let name = ["jsonl": "events.jsonl", "sqlite": "events.sqlite"][sink["type"]?.stringValue ?? ""] {
            files.append(("path", stateDirectory + "/" + name))
        }
        if sink["type"]?.stringValue == "otlp", let file = sink["file"]?.stringValue, !file.isEmpty {
            let resolved = SinkContext(options: ["file": .string(file)], configDirectory: configDirectory)
            files.append(("file", (try? resolved.filePath("file")) ?? file))
        }
        return files
    }

    /// One name per file: the resolved path of an existing file (links and `..` followed), else the
    /// absolute path with its existing directory resolved.
    static func identity(of path: String) -> String {
        func resolved(_ path: String) -> String? {
            guard let real = realpath(path, nil) else { return nil }
            defer { free(real) }
            return String(cString: real)
        }
        let absolute = FlowScopeConfig.absolutePath(path)
        if let file = resolved(absolute) { return file }
        let directory = FilePaths.directory(of: absolute)
        return resolved(directory).map { $0 + "/" + (absolute as NSString).lastPathComponent } ?? absolute
    }

    /// Why an existing file cannot be the sqlite sink's database, or nil: it must be a regular file,
    /// empty or starting with SQLite's header.
    static func sqliteFileProblem(_ path: String, _ st: stat) -> String? {
        guard (st.st_mode & S_IFMT) == S_IFREG else { return "not a regular file, expected an SQLite database file" }
        guard st.st_size > 0 else { return nil }
        guard let handle = FileHandle(forReadingAtPath: path) else { return "not readable" }
        defer { try? handle.close() }
        let header = (try? handle.read(upToCount: 16)) ?? Data()
        return header == Data("SQLite format 3\u{0}".utf8) ? nil : "not an SQLite database (its first bytes are not SQLite's header)"
    }

    /// What keeps `path` from being read as a file, or nil when it can be.
    static func fileProblem(_ path: String) -> String? {
        var st = stat()
        guard stat(path, &st) == 0 else { return describe(errno: errno) }
        if (st.st_mode & S_IFMT) == S_IFDIR { return "is a directory, expected a file" }
        guard access(path, R_OK) == 0 else { return "not readable (\(describe(errno: errno)))" }
        return nil
    }

    /// `fileProblem`, for an error message: "not found" when the file is missing.
    static func whyUnreadable(_ path: String) -> String { fileProblem(path) ?? "cannot read the file" }

    /// What keeps `path` from being a usable directory (writable, when `writable`), or nil. A
    /// directory that does not exist is fine unless `mustExist`, when its nearest existing parent is a
    /// writable directory (it can be created).
    static func directoryProblem(_ path: String, mustExist: Bool = false, writable: Bool = true) -> String? {
        var st = stat()
        if stat(path, &st) == 0 {
            guard (st.st_mode & S_IFMT) == S_IFDIR else { return "not a directory" }
            guard !writable || access(path, W_OK | X_OK) == 0 else { return "not writable (\(describe(errno: errno)))" }
            return nil
        }
        guard errno == ENOENT || errno == ENOTDIR else { return describe(errno: errno) }
        if mustExist { return "not found" }
        var parent = FilePaths.directory(of: FlowScopeConfig.absolutePath(path))
        while !parent.isEmpty, parent != "/", stat(parent, &st) != 0 { parent = FilePaths.directory(of: parent) }
        if stat(parent, &st) == 0, (st.st_mode & S_IFMT) != S_IFDIR { return "cannot be created: \(parent) is not a directory" }
        guard access(parent, W_OK | X_OK) == 0 else { return "cannot be created: \(parent) is not writable" }
        return nil
    }

    /// errno in words: "not found" for ENOENT, "not readable (permission denied)" for EACCES.
    static func describe(errno code: Int32) -> String {
        switch code {
        case ENOENT: return "not found"
        case EACCES, EPERM: return "permission denied"
        case ENOTDIR: return "not found (a parent is not a directory)"
        default: return String(cString: strerror(code))
        }
    }
}
