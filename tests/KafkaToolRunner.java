/*
 * One JVM that runs many of Kafka's bin/ tools in turn, for the tests (tests/kafka39.py
 * kafka_tool): each tool's JVM start and class loading (about 2-5 s) is paid once, not per run.
 *
 * Each run behaves as the tool's own JVM would: its main class's main(args) in a fresh thread
 * group; System.in the given bytes; System.out / System.err (and log4j's console appender, which
 * writes to System.err) captured for the run; Kafka's Exit.exit / Exit.halt and System.exit
 * (a SecurityManager's checkExit) end the run with their status, the first one called winning
 * (the exiting thread waits, nothing is thrown into the tool);
 * if main returns, the run waits for the non-daemon threads it started, as a JVM does before
 * it exits; then the shutdown hooks the run added (Kafka's Exit.addShutdownHook, and
 * Runtime.addShutdownHook read from java.lang.ApplicationShutdownHooks) run, concurrently, as
 * at a JVM's exit; then the run's threads still alive are stopped (the process would be gone),
 * its system properties restored and the kafka.* MBeans it left unregistered (a fresh JVM has
 * none).
 *
 * Protocol on the JVM's own stdin/stdout, every int big-endian, every string an int length
 * then UTF-8 bytes. Request: main class, log dir (kafka.logs.dir), stdin (length -1: none, an
 * empty stream), the argument count, the arguments. Answer: exit status, stdout, stderr.
 * The runner first answers an int 0 (ready), and ends at EOF on its stdin. One run at a time.
 */

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.management.ManagementFactory;
import java.lang.reflect.Field;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.security.Permission;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import javax.management.MBeanServer;
import javax.management.ObjectName;

public final class KafkaToolRunner {
    /** A stream whose target is switched per run (every thread writes to the run's buffer). */
    static final class Switch extends OutputStream {
        volatile OutputStream target;

        Switch(OutputStream target) {
            this.target = target;
        }

        @Override public void write(int b) throws IOException {
            target.write(b);
        }

        @Override public void write(byte[] b, int off, int len) throws IOException {
            target.write(b, off, len);
        }

        @Override public void flush() throws IOException {
            target.flush();
        }
    }

    static final class SwitchIn extends InputStream {
        volatile InputStream source = new ByteArrayInputStream(new byte[0]);

        @Override public int read() throws IOException {
            return source.read();
        }

        @Override public int read(byte[] b, int off, int len) throws IOException {
            return source.read(b, off, len);
        }

        @Override public int available() throws IOException {
            return source.available();
        }
    }

    static final Object lock = new Object();
    static ThreadGroup current;  // the run's threads: an exit from elsewhere is a finished run's
    static Integer status;
    static final List<Runnable> exitHooks = new ArrayList<>();
    static final Set<Thread> exiting = java.util.concurrent.ConcurrentHashMap.newKeySet();

    /** An exit: the run's status (the first exit wins); the calling thread then waits, as a
     * JVM's exiting thread does while the hooks run, until the run's end stops it. Nothing is
     * thrown into the tool, which could catch and print it. */
    static void exited(int code) {
        synchronized (lock) {
            if (status == null && current != null
                    && current.parentOf(Thread.currentThread().getThreadGroup())) {
                status = code;
            }
        }
        exiting.add(Thread.currentThread());
        while (true) {  // never stopped (it could catch that, print and exit again): parked
            try {
                Thread.sleep(Long.MAX_VALUE);
            } catch (InterruptedException e) {
                // stays
            }
        }
    }

    static Integer status() {
        synchronized (lock) {
            return status;
        }
    }

    public static void main(String[] argv) throws Exception {
        DataInputStream requests = new DataInputStream(System.in);
        DataOutputStream answers = new DataOutputStream(new FileOutputStream(FileDescriptor.out));
        PrintStream diagnostics = System.err;
        Switch out = new Switch(diagnostics);
        Switch err = new Switch(diagnostics);
        SwitchIn in = new SwitchIn();
        System.setOut(new PrintStream(out, true));
        System.setErr(new PrintStream(err, true));
        System.setIn(in);
        Class<?> exit = Class.forName("org.apache.kafka.common.utils.Exit");
        Class<?> procedure = Class.forName("org.apache.kafka.common.utils.Exit$Procedure");
        Class<?> adder = Class.forName("org.apache.kafka.common.utils.Exit$ShutdownHookAdder");
        Object onExit = java.lang.reflect.Proxy.newProxyInstance(
            procedure.getClassLoader(), new Class<?>[] {procedure},
            (proxy, method, args) -> {
                if (method.getName().equals("execute")) {
                    exited((Integer) args[0]);
                }
                return method.getDeclaringClass() == Object.class ? method.invoke(proxy, args) : null;
            });
        Object onHook = java.lang.reflect.Proxy.newProxyInstance(
            adder.getClassLoader(), new Class<?>[] {adder},
            (proxy, method, args) -> {
                if (method.getName().equals("addShutdownHook")) {
                    synchronized (exitHooks) {
                        exitHooks.add((Runnable) args[1]);
                    }
                }
                return null;
            });
        exit.getMethod("setExitProcedure", procedure).invoke(null, onExit);
        exit.getMethod("setHaltProcedure", procedure).invoke(null, onExit);
        exit.getMethod("setShutdownHookAdder", adder).invoke(null, onHook);
        System.setSecurityManager(new SecurityManager() {
            @Override public void checkPermission(Permission perm) {
            }

            @Override public void checkPermission(Permission perm, Object context) {
            }

            @Override public void checkExit(int code) {
                exited(code);
            }
        });
        Field hooksField = Class.forName("java.lang.ApplicationShutdownHooks")
            .getDeclaredField("hooks");
        hooksField.setAccessible(true);
        MBeanServer mbeans = ManagementFactory.getPlatformMBeanServer();
        answers.writeInt(0);  // ready
        answers.flush();
        int run = 0;
        while (true) {
            String mainClass;
            try {
                mainClass = readString(requests);
            } catch (EOFException e) {
                break;
            }
            String logDir = readString(requests);
            byte[] stdin = readBytes(requests);
            String[] args = new String[requests.readInt()];
            for (int i = 0; i < args.length; i++) {
                args[i] = readString(requests);
            }
            ByteArrayOutputStream stdout = new ByteArrayOutputStream();
            ByteArrayOutputStream stderr = new ByteArrayOutputStream();
            Properties saved = (Properties) System.getProperties().clone();
            System.setProperty("kafka.logs.dir", logDir);
            in.source = new ByteArrayInputStream(stdin == null ? new byte[0] : stdin);
            out.target = stdout;
            err.target = stderr;
            ThreadGroup group = new ThreadGroup("tool-run-" + (++run));
            synchronized (lock) {
                status = null;
                current = group;
            }
            synchronized (exitHooks) {
                exitHooks.clear();
            }
            Set<Thread> hooksBefore = hooks(hooksField).keySet();
            Throwable[] failure = new Throwable[1];
            Thread main = new Thread(group, () -> {
                try {
                    Method m = Class.forName(mainClass).getMethod("main", String[].class);
                    m.invoke(null, (Object) args);
                } catch (InvocationTargetException e) {
                    failure[0] = e.getCause();
                } catch (Throwable e) {
                    failure[0] = e;
                }
            }, "main");
            main.start();
            while (main.isAlive() && status() == null) {  // an exit from another thread ends it
                main.join(50);
            }
            if (status() == null && failure[0] != null) {
                System.err.print("Exception in thread \"main\" ");
                failure[0].printStackTrace();
            }
            if (status() == null) {  // main ended: a JVM waits for its other non-daemon threads
                for (Thread t : threads(group)) {
                    while (!t.isDaemon() && t != main && t.isAlive() && status() == null) {
                        t.join(50);
                    }
                }
            }
            exitStatus(failure[0] == null ? 0 : 1);  // kept if an exit came first
            int code = status();
            List<Thread> atExit = new ArrayList<>();
            synchronized (exitHooks) {
                for (Runnable hook : exitHooks) {
                    atExit.add(new Thread(group, hook, "shutdown-hook"));
                }
            }
            for (Thread hook : new ArrayList<>(hooks(hooksField).keySet())) {
                if (!hooksBefore.contains(hook)) {
                    Runtime.getRuntime().removeShutdownHook(hook);
                    atExit.add(hook);
                }
            }
            for (Thread hook : atExit) {
                hook.start();
            }
            for (Thread hook : atExit) {
                hook.join();
            }
            System.out.flush();
            System.err.flush();
            out.target = diagnostics;
            err.target = diagnostics;
            halt(group);
            System.setProperties(saved);
            for (ObjectName name : mbeans.queryNames(null, null)) {
                if (name.getDomain().startsWith("kafka.")) {
                    try {
                        mbeans.unregisterMBean(name);
                    } catch (Exception e) {
                        // gone meanwhile
                    }
                }
            }
            answers.writeInt(code);
            writeBytes(answers, stdout.toByteArray());
            writeBytes(answers, stderr.toByteArray());
            answers.flush();
        }
        Runtime.getRuntime().halt(0);  // checkExit would refuse System.exit
    }

    static void exitStatus(int code) {
        synchronized (lock) {
            if (status == null) {
                status = code;
            }
        }
    }

    @SuppressWarnings("unchecked")
    static Map<Thread, Thread> hooks(Field field) throws IllegalAccessException {
        synchronized (field.getDeclaringClass()) {  // as ApplicationShutdownHooks locks it
            Object hooks = field.get(null);
            return hooks == null ? Map.of() : new IdentityHashMap<>((Map<Thread, Thread>) hooks);
        }
    }

    static List<Thread> threads(ThreadGroup group) {
        Thread[] all = new Thread[group.activeCount() + 16];
        int n = group.enumerate(all, true);
        List<Thread> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            out.add(all[i]);
        }
        return out;
    }

    /** The run's threads still alive stop, as its process would have ended (those parked in
     * an exit stay parked); waits for them, 2 s at most. */
    @SuppressWarnings("deprecation")
    static void halt(ThreadGroup group) throws InterruptedException {
        for (Thread t : threads(group)) {
            if (!exiting.contains(t)) {
                t.stop();
            }
        }
        long deadline = System.nanoTime() + 2_000_000_000L;
        for (Thread t : threads(group)) {
            while (t.isAlive() && !exiting.contains(t) && System.nanoTime() < deadline) {
                t.join(10);
            }
        }
    }

    static byte[] readBytes(DataInputStream in) throws IOException {
        int n = in.readInt();
        if (n < 0) {
            return null;
        }
        byte[] b = new byte[n];
        in.readFully(b);
        return b;
    }

    static String readString(DataInputStream in) throws IOException {
        return new String(readBytes(in), StandardCharsets.UTF_8);
    }

    static void writeBytes(DataOutputStream out, byte[] b) throws IOException {
        out.writeInt(b.length);
        out.write(b);
    }
}
