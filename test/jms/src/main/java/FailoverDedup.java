// Exactly-once publishing from qpid-jms across failover, run by
// test/jms/failover-dedup.test.ts, which kills the primary of a tandem cluster under
// this load and promotes a backup, round after round.
// Usage: FailoverDedup <failover-url> <queue with a window> <queue without> <producers per queue> <drain-seconds>
//
// Producers: for each of the two queues, <producers per queue> threads, each on its
// own connection (so each fails over on its own), sending persistent TextMessages with
// synchronous send() and qpid-jms' own JMSMessageID. Every message carries an int
// property `seq`, unique across the run (producer number * 10,000,000 + n). A send()
// that returned is an acknowledged message; one that threw may or may not be queued.
// A send is in doubt when the producer's connection failed while it ran (qpid-jms then
// sends the same message again on the new connection: the old primary may have taken
// it already).
//
// stdin: "stop" stops the producers ("stopped" line with what was sent); then
// "drain <expected with window> <expected without>" drains both queues with a fresh
// consumer (the cluster is quiet by then, so each queued message arrives once) until
// the expected numbers arrived and nothing more comes, or drain-seconds pass; the last
// line is the result. stdout: JSON lines, a progress line every 250 ms.
import jakarta.jms.*;
import org.apache.qpid.jms.JmsConnection;
import org.apache.qpid.jms.JmsConnectionFactory;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.*;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

public class FailoverDedup {
  /** One producer: its connection's events (FailoverLink) and its sends. */
  static final class Producer extends FailoverLink {
    final int number;
    final Target target;
    final AtomicInteger acked = new AtomicInteger();
    volatile String error;

    Producer(int number, Target target) {
      this.number = number;
      this.target = target;
    }

    void run(JmsConnectionFactory cf) throws Exception {
      JmsConnection connection = (JmsConnection) cf.createConnection();
      connection.addConnectionListener(this);
      try {
        connection.start();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer producer = session.createProducer(session.createQueue(target.queue));
        producer.setDeliveryMode(DeliveryMode.PERSISTENT);
        for (int n = 0; !stop && n < 10_000_000; n++) {
          int seq = number * 10_000_000 + n;
          TextMessage m = session.createTextMessage("message " + seq);
          m.setIntProperty("seq", seq);
          int interruptionsBefore = interrupted.get();
          boolean downBefore = down;
          target.attempted.incrementAndGet();
          boolean failed = false;
          try {
            producer.send(m);
            target.acked.add(seq);
            acked.incrementAndGet();
          } catch (JMSException e) {
            failed = true;
            target.failedSends.put(seq, e.toString());
          }
          // qpid-jms sets JMSMessageID on the message given to send(), before it goes out.
          target.sentIds.put(seq, String.valueOf(m.getJMSMessageID()));
          if (failed || downBefore || interrupted.get() != interruptionsBefore) target.inDoubt.add(seq);
          Thread.sleep(1); // a steady load, not a flood: the machine is shared
        }
      } finally {
        connection.close();
      }
    }
  }

  /** A queue and what was sent to it and drained from it. */
  static final class Target {
    final String queue;
    final AtomicInteger attempted = new AtomicInteger();
    final Set<Integer> acked = ConcurrentHashMap.newKeySet();
    final Set<Integer> inDoubt = ConcurrentHashMap.newKeySet();
    final Map<Integer, String> failedSends = new ConcurrentHashMap<>();
    /** seq → the JMSMessageID qpid-jms gave the send. */
    final Map<Integer, String> sentIds = new ConcurrentHashMap<>();
    /** seq → the JMSMessageID of each copy drained. */
    final Map<Integer, List<String>> arrivals = new HashMap<>();
    int drained;
    String drainError;

    Target(String queue) { this.queue = queue; }

    void drain(JmsConnectionFactory cf, int expected, long deadline) {
      try {
        Connection connection = cf.createConnection();
        try {
          connection.start();
          Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
          MessageConsumer consumer = session.createConsumer(session.createQueue(queue));
          while (System.currentTimeMillis() < deadline) {
            Message m = consumer.receive(1000);
            if (m == null) {
              if (drained >= expected && everyAckedArrived()) break;
              continue;
            }
            drained++;
            arrivals.computeIfAbsent(m.getIntProperty("seq"), k -> new ArrayList<>()).add(String.valueOf(m.getJMSMessageID()));
          }
        } finally {
          connection.close();
        }
      } catch (Throwable e) {
        drainError = e.toString();
      }
    }

    boolean everyAckedArrived() {
      for (int seq : acked) if (!arrivals.containsKey(seq)) return false;
      return true;
    }

    String result() {
      List<Integer> missing = new ArrayList<>();
      for (int seq : acked) if (!arrivals.containsKey(seq)) missing.add(seq);
      Collections.sort(missing);
      List<Integer> unknown = new ArrayList<>();
      for (int seq : arrivals.keySet()) if (!sentIds.containsKey(seq)) unknown.add(seq);
      Collections.sort(unknown);
      int failedPresent = 0;
      for (int seq : failedSends.keySet()) if (arrivals.containsKey(seq)) failedPresent++;
      // Each duplicated seq: the id its send() was given, the ids of the copies, whether it was in doubt.
      StringBuilder dups = new StringBuilder("{");
      new TreeMap<>(arrivals).forEach((seq, ids) -> {
        if (ids.size() < 2) return;
        if (dups.length() > 1) dups.append(',');
        dups.append('"').append(seq).append("\":{\"sentId\":").append(Json.of(sentIds.get(seq)))
            .append(",\"copies\":").append(Json.of(ids)).append(",\"inDoubt\":").append(inDoubt.contains(seq))
            .append(",\"acked\":").append(acked.contains(seq)).append('}');
      });
      return "{\"queue\":" + Json.of(queue) + ",\"attempted\":" + attempted.get() + ",\"acked\":" + acked.size()
          + ",\"drained\":" + drained + ",\"distinct\":" + arrivals.size() + ",\"missing\":" + missing
          + ",\"unknown\":" + unknown + ",\"duplicates\":" + dups.append('}')
          + ",\"inDoubt\":" + new TreeSet<>(inDoubt)
          + ",\"failedSends\":" + Json.of(new ArrayList<>(new TreeMap<>(failedSends).entrySet()))
          + ",\"failedPresent\":" + failedPresent + ",\"drainError\":" + Json.of(drainError) + "}";
    }
  }

  static volatile boolean stop;

  public static void main(String[] args) throws Exception {
    JmsConnectionFactory cf = new JmsConnectionFactory(args[0]);
    Target windowed = new Target(args[1]);
    Target plain = new Target(args[2]);
    int perQueue = Integer.parseInt(args[3]);
    long drainMs = Long.parseLong(args[4]) * 1000;

    List<Producer> producers = new ArrayList<>();
    for (int i = 0; i < 2 * perQueue; i++) producers.add(new Producer(i, i < perQueue ? windowed : plain));
    List<Thread> threads = new ArrayList<>();
    for (Producer p : producers) {
      Thread t = new Thread(() -> {
        try {
          p.run(cf);
        } catch (Throwable e) {
          p.error = e.toString();
        }
      }, "producer-" + p.number);
      threads.add(t);
      t.start();
    }
    Thread progress = new Thread(() -> {
      while (!Thread.currentThread().isInterrupted()) {
        StringBuilder acked = new StringBuilder(), interrupted = new StringBuilder(), restored = new StringBuilder();
        for (Producer p : producers) {
          String sep = p.number == 0 ? "" : ",";
          acked.append(sep).append(p.acked.get());
          interrupted.append(sep).append(p.interrupted.get());
          restored.append(sep).append(p.restored.get());
        }
        System.out.println("{\"event\":\"progress\",\"acked\":[" + acked + "],\"interrupted\":[" + interrupted + "],\"restored\":[" + restored + "]}");
        System.out.flush();
        try {
          Thread.sleep(250);
        } catch (InterruptedException e) {
          return;
        }
      }
    }, "progress");
    progress.setDaemon(true);
    progress.start();

    BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
    String line;
    while ((line = in.readLine()) != null && !line.trim().equals("stop")) {}
    stop = true;
    for (Thread t : threads) t.join();
    progress.interrupt();
    progress.join();
    System.out.println("{\"event\":\"stopped\",\"attempted\":[" + windowed.attempted.get() + "," + plain.attempted.get() + "]}");
    System.out.flush();

    while ((line = in.readLine()) != null && !line.trim().startsWith("drain")) {}
    String[] expected = line == null ? new String[] {"drain", "0", "0"} : line.trim().split("\\s+");
    long deadline = System.currentTimeMillis() + drainMs;
    windowed.drain(cf, Integer.parseInt(expected[1]), deadline);
    plain.drain(cf, Integer.parseInt(expected[2]), deadline);

    StringBuilder producerJson = new StringBuilder("[");
    for (Producer p : producers) {
      if (producerJson.length() > 1) producerJson.append(',');
      producerJson.append("{\"queue\":").append(Json.of(p.target.queue)).append(",\"acked\":").append(p.acked.get())
          .append(",\"error\":").append(Json.of(p.error)).append(",\"events\":").append(Json.of(p.events)).append('}');
    }
    System.out.println("{\"event\":\"result\",\"windowed\":" + windowed.result() + ",\"plain\":" + plain.result()
        + ",\"producers\":" + producerJson.append(']') + "}");
    System.out.flush();
    System.exit(0);
  }
}
