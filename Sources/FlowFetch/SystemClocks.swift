import Foundation
#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#endif

// Every clock the libraries read from the C library is read here: `clock_gettime` and its clock
// names are POSIX, spelled the same on Linux and Apple platforms (iOS 10 and macOS 10.12 on).
// Tests/PackageGraphTests/PlatformCallTests.swift lists these calls and fails on one elsewhere.

/// The system's clocks, for the engine, the event pipeline and the strategy lab.
package enum SystemClocks {
    /// Wall-clock microseconds since 1970, UTC.
    package static func wallMicroseconds() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1_000_000 + Int64(ts.tv_nsec) / 1_000
    }

    /// Wall-clock seconds since 1970, UTC, with sub-microsecond resolution.
    package static func wallSeconds() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    /// CPU seconds the calling thread has used (robust to other processes sharing the cores).
    package static func threadCPUSeconds() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) * 1e-9
    }
}
