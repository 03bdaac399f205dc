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

    /// Runs the checks in order: state directory, TLS files, token, web root, sinks (options, then
    /// the files and programs their factories declare), demo scenario, the demo's cache directory,
    /// engine fallback file. The first failure is thrown.
    init(config: FlowScopeConfig, overrides: ServeStack.Overrides) throws(ServeStack.StartError) {
        let input = Input(config: config, overrides: overrides)
        stateDir = try Self.stateDirectory(input)
        tls = try Self.tlsSource(input, stateDir: stateDir)
        try Self.checkToken(input, stateDir: stateDir)
        web = try Self.webRoot(input)
        try Self.checkSinks(input, stateDir: stateDir)
        (demo, population) = try Self.demoBackend(input)
        cacheDir = demo == nil ? nil : try Self.demoCacheDirectory(input, stateDir: stateDir)
        fallback = try Self.fallbackFile(input)
    }

    /// What every check reads, and how a failure names the config file and key.
    struct Input {
        let config: FlowScopeConfig
        let overrides: ServeStack.Overrides
        var file: String { config.file ?? FlowScopeConfig.embeddedName }

        /// `<file>: $.<key>: <absolute path>: <problem>`.
        func fail(_ key: String, _ path: String, _ problem: String) -> ServeStack.StartError {
            ServeStack.StartError(description: "\(file): $.\(key): \(FlowScopeConfig.absolutePath(path)): \(problem)")
        }

        /// `<file>: $.<key>: <message>`.
        func fail(_ key: String, _ message: String) -> ServeStack.StartError {
            ServeStack.StartError(description: "\(file): $.\(key): \(message)")
        }
    }

    /// The state directory: an existing writable directory, or one that can be created.
    static func stateDirectory(_ input: Input) throws(ServeStack.StartError) -> String {
        let config = input.config, overrides = input.overrides
        let stateDir = overrides.stateDir ?? config.server.stateDir
        guard let problem = directoryProblem(stateDir) else { return stateDir }
        if overrides.stateDir != nil {
            throw ServeStack.StartError(description: "--state-dir \(FlowScopeConfig.absolutePath(stateDir)): \(problem)")
        }
        if config.server.stateDir == FlowScopeConfig.Server().stateDir {
            throw ServeStack.StartError(description: "state directory \(FlowScopeConfig.absolutePath(stateDir)): \(problem) "
                                        + "(set server.stateDir or --state-dir)")
        }
        throw input.fail("server.stateDir", stateDir, problem)
    }

    /// TLS: a configured pair must exist, be PEM and match; a generated pair is read if present.
    static func tlsSource(_ input: Input, stateDir: String) throws(ServeStack.StartError) -> TLSSource {
        let server = input.config.server
        if input.overrides.insecureHTTP { return .none }
        if let cert = server.tlsCert, let key = server.tlsKey {
            if let problem = fileProblem(cert) { throw input.fail("server.tls.cert", cert, problem) }
            if let problem = fileProblem(key) { throw input.fail("server.tls.key", key, problem) }
            do throws(ServerFileError) {
                _ = try TLSMaterial.load(certPath: cert, keyPath: key)
            } catch {
                throw input.fail(error.path == key ? "server.tls.key" : "server.tls.cert", error.path, error.message)
            }
            return .configured(cert: cert, key: key)
        }
        let directory = server.tlsDir ?? stateDir + "/tls"
        let key = server.tlsDir != nil ? "server.tls.dir" : "server.stateDir"
        let certFile = directory + "/cert.pem", keyFile = directory + "/key.pem"
        let haveCert = FileManager.default.fileExists(atPath: certFile), haveKey = FileManager.default.fileExists(atPath: keyFile)
        if haveCert && haveKey {
            do throws(ServerFileError) {
                _ = try TLSMaterial.load(certPath: certFile, keyPath: keyFile)
            } catch {
                throw input.fail(key, error.path, error.message + " (remove cert.pem and key.pem to regenerate)")
            }
        } else if haveCert != haveKey {
            throw input.fail(key, haveCert ? keyFile : certFile, "not found while its pair exists; remove both files to regenerate")
        } else if let problem = directoryProblem(directory) {
            throw input.fail(key, directory, problem)
        }
        return .generated(directory: directory)
    }

    /// The token: a configured one is well formed; a generated one already on disk is readable.
    static func checkToken(_ input: Input, stateDir: String) throws(ServeStack.StartError) {
        do throws(ServerFileError) {
            if let configured = input.config.server.token {
                _ = try AuthToken(configured: configured)
            } else if FileManager.default.fileExists(atPath: AuthToken.path(stateDir: stateDir)) {
                _ = try AuthToken.loadOrCreate(stateDir: stateDir)  // reads only: the file exists
            }
        } catch {
            throw input.config.server.token != nil ? input.fail("server.auth.token", error.message)
                                                   : input.fail("server.stateDir", error.path, error.message)
        }
    }

    /// The dashboard: a configured web root is a directory with an index.html, so GET / has a page.
    static func webRoot(_ input: Input) throws(ServeStack.StartError) -> StaticFiles {
        guard let root = input.config.server.webRoot else { return StaticFiles(files: EmbeddedFiles.dashboard, label: "(embedded dashboard)") }
        if let problem = directoryProblem(root, mustExist: true, writable: false) { throw input.fail("server.webRoot", root, problem) }
        let web: StaticFiles
        do throws(ServerFileError) {
            web = try StaticFiles(root: root)
        } catch {
            throw input.fail("server.webRoot", root, error.message)
        }
        guard web.hasIndex else { throw input.fail("server.webRoot", root, "has no index.html, so GET / would have nothing to serve") }
        return web
    }

    /// Sinks: every option valid (the registry's validation, which opens nothing), then what each
    /// enabled sink's factory declares it needs (``SinkRequirements``): its files and its programs.
    static func checkSinks(_ input: Input, stateDir: String) throws(ServeStack.StartError) {
        let config = input.config
        let needs: [(path: String, requirements: SinkRequirements)]
        do throws(JSONInputError) {
            try SinkRegistry.current.validateSinks(config.sinks, stateDirectory: stateDir, version: flowScopeVersion,
                                                   configDirectory: config.directory)
            needs = try SinkRegistry.current.requirements(config.sinks, stateDirectory: stateDir, version: flowScopeVersion,
                                                          configDirectory: config.directory)
        } catch {
            throw ServeStack.StartError(description: error.inFile(input.file).description)
        }
        // Each file written by one sink only, and never the config file itself (an events file
        // appended to the config would leave a config that no longer parses).
        var writers: [String: String] = [:]
        if let configFile = config.file { writers[identity(of: configFile)] = "the config file" }
        for (entry, requirements) in needs {
            let at = String(entry.dropFirst(2))  // `sinks[2]`: `fail` adds the `$.`
            for file in requirements.files {
                let key = at + "." + file.option
                let identity = identity(of: file.path)
                if let other = writers[identity] {
                    throw input.fail(key, file.path, "already written by \(other) (give each sink a file of its own)")
                }
                writers[identity] = "$." + key
                if let problem = writableFileProblem(file.path, format: file.format) { throw input.fail(key, file.path, problem) }
            }
            for program in requirements.programs {
                if let problem = SinkRequirements.problem(program: program.program) {
                    throw input.fail(at + "." + program.option, "\(program.program): \(problem)")
                }
            }
        }
    }

    /// Why a sink cannot write `path`, or nil: an existing file must be a writable file (of `format`,
    /// when given); a missing one needs a directory that exists or can be created.
    static func writableFileProblem(_ path: String, format: SinkRequirements.FileFormat?) -> String? {
        var st = stat()
        guard stat(path, &st) == 0 else {
            return directoryProblem(FilePaths.directory(of: path)).map {
                "directory \(FlowScopeConfig.absolutePath(FilePaths.directory(of: path))): \($0)"
            }
        }
        if (st.st_mode & S_IFMT) == S_IFDIR { return "is a directory, expected a file" }
        if access(path, W_OK) != 0 { return describe(errno: errno) }
        guard let format else { return nil }
        return formatProblem(path, st, format)
    }

    /// The demo backend: the population's, or the configured scenario file, or the embedded one, parses.
    static func demoBackend(_ input: Input) throws(ServeStack.StartError) -> (Scenario?, Population?) {
        let demo = input.config.demo
        guard demo.enabled && !input.overrides.noDemo else { return (nil, nil) }
        if let population = demo.population { return (population.demoScenario, population) }
        let text: String, name: String
        if let path = demo.scenario {
            if let problem = fileProblem(path) { throw input.fail("demo.scenario", path, problem) }
            guard let data = FileManager.default.contents(atPath: path) else { throw input.fail("demo.scenario", path, "not readable") }
            text = String(decoding: data, as: UTF8.self)
            name = path
        } else {
            text = EmbeddedFiles.demoScenario
            name = EmbeddedFiles.demoScenarioName
        }
        do throws(JSONInputError) {
            return (try Scenario.decode(text, file: name), nil)
        } catch {
            throw input.fail("demo.scenario", error.description)
        }
    }

    /// The demo's cache directory: an existing writable directory, or one that can be created.
    static func demoCacheDirectory(_ input: Input, stateDir: String) throws(ServeStack.StartError) -> String {
        let directory = input.config.engine.cacheDir ?? stateDir + "/cache"
        if let problem = directoryProblem(directory) { throw input.fail("engine.cacheDir", directory, problem) }
        return directory
    }

    /// The engine's fallback file: loaded and checked as a client configured with it would
    /// (fetch-rules.md, "The fallback file"), so a missing or broken one is found now.
    static func fallbackFile(_ input: Input) throws(ServeStack.StartError) -> FallbackFile? {
        guard let path = input.config.engine.fallbackFile else { return nil }
        if let problem = fileProblem(path) { throw input.fail("engine.fallbackFile", path, problem) }
        do throws(JSONInputError) {
            return try FallbackFile.load(path: FlowScopeConfig.absolutePath(path))
        } catch {
            throw input.fail("engine.fallbackFile", error.description)
        }
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

    /// Why an existing file cannot be reopened as `format`, or nil: it must be a regular file, empty or
    /// starting with the format's header.
    static func formatProblem(_ path: String, _ st: stat, _ format: SinkRequirements.FileFormat) -> String? {
        guard (st.st_mode & S_IFMT) == S_IFREG else { return "not a regular file, expected \(format.description) file" }
        guard st.st_size > 0 else { return nil }
        guard let handle = FileHandle(forReadingAtPath: path) else { return "not readable" }
        defer { try? handle.close() }
        let header = (try? handle.read(upToCount: format.header.count)) ?? Data()
        return header == Data(format.header) ? nil : "not \(format.description) (its first bytes are not \(format.headerOwner)'s header)"
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
