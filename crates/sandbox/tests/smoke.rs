use codemode_sandbox::*;
#[test]
fn smoke() {
    let _ = tracing_subscriber::fmt().with_max_level(tracing::Level::DEBUG).try_init(); let t = std::time::Instant::now();
    let sb = Sandbox::new(SandboxConfig::default()).unwrap();
    eprintln!("new: {:?} base mem {}", t.elapsed(), sb.base_memory_bytes());
    let limits = Limits::default();
    for code in ["return 1", "text('hi'); json({a:1n, d:new Date(0), m:new Map([['x',1]]), s:new Set([1,2])}); return [1, NaN, undefined]",
                 "let x = ;", "null.x", "\n\nthrow new TypeError('boom')", "throw 'str'", "return Math.random()", "return typeof require + typeof process + typeof fetch",
                 "await new Promise(()=>{})", "const a = {}; a.a = a; return a", "return {get x(){ throw new Error('nope') }}",
                 "let s=[]; while(true) s.push('x'.repeat(1e6))", "function f(){return f()+1}; return f()", "while(true){}", "for(;;) text('xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx')",
                 "await import('x')", "return Date.now()"] {
        let mut l = limits.clone();
        l.timeout = std::time::Duration::from_millis(300);
        let t = std::time::Instant::now();
        let (mut vm, step) = sb.start(code, &l).unwrap();
        let o = format!("{:?}", vm.take_output()); eprintln!("{code:?} -> {step:?} {:?} out={} in {:?}", vm.outstanding_requests(), &o[..o.len().min(200)], t.elapsed());
    }
    let (mut vm, step) = sb.start("let n = 40; await yield_control('x'); return n + 2", &limits).unwrap();
    eprintln!("{step:?}");
    let req = vm.take_new_requests();
    eprintln!("{req:?}");
    let snap = vm.suspend().unwrap();
    let bytes = snap.to_bytes();
    eprintln!("snap {:?} size {} bytes {}", snap, snap.size_bytes(), bytes.len());
    let snap2 = Snapshot::from_bytes(&bytes, &sb.build_id(), 1<<30).unwrap();
    let mut vm = sb.restore(&snap2, &limits).unwrap();
    eprintln!("{:?}", vm.settle(req[0].id, Settlement::Resolve(serde_json::Value::Null)));
}
