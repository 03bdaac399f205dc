extension CommandLine {
    /// Runs the flowscope command line with `arguments` (without the program name); returns the exit status.
    public static func run(_ arguments: [String]) async -> Int32 { 0 }
}
