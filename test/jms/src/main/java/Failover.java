// A JMS producer and consumer as JMS users write them, on a failover: URL over every
// broker of a tandem cluster, run by test/jms/failover.test.ts, which kills the primary
// under this load and promotes a backup. Usage: Failover <failover-url> <queue> <drain-seconds>
//
// The producer sends persistent TextMessages (int property `seq`, 0, 1, 2, ...) with
// synchronous send(): a send() that returned is an acknowledged message. The consumer
// runs CLIENT_ACKNOWLEDGE and acknowledges every 10 messages. Each has its own
// connection, so each fails over on its own.
//
// stdout: a progress line (JSON) every 200 ms; on "stop" from stdin the producer stops,
// the consumer drains (until every acknowledged message has arrived, or drain-seconds
// pass), and the last line is the result: what was acknowledged, what arrived how often
// and in which connection generation, and which sends were in doubt (a failover
// happened while send() ran: qpid-jms then sends again, so the broker may hold two).
import jakarta.jms.*;
import org.apache.qpid.jms.JmsConnection;
import org.apache.qpid.jms.JmsConnectionFactory;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.*;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

public class Failover {
  static volatile boolean stop;
  static final FailoverLink producerLink = new FailoverLink();
  static final FailoverLink consumerLink = new FailoverLink();
  static final AtomicInteger acked = new AtomicInteger(); // sends that returned
  static final Set<Integer> ackedSeqs = ConcurrentHashMap.newKeySet();
  static final Set<Integer> inDoubt = ConcurrentHashMap.newKeySet();
  static final Map<Integer, String> failedSends = new ConcurrentHashMap<>();
  /**
   * seq → one entry per arrival: the consumer's interruption count then, `d` if it came
   * while the connection was down (from what qpid-jms had prefetched before), `r` if
   * JMSRedelivered.
   */
  static final Map<Integer, List<String>> arrivals = new ConcurrentHashMap<>();
  static final AtomicInteger received = new AtomicInteger();
  static volatile String producerError;
  static volatile String consumerError;

  public static void main(String[] args) throws Exception {
    JmsConnectionFactory cf = new JmsConnectionFactory(args[0]);
    String queue = args[1];
    long drainMs = Long.parseLong(args[2]) * 1000;

    Thread producer = new Thread(() -> {
      try {
        produce(cf, queue);
      } catch (Throwable e) {
        producerError = e.toString();
      }
    }, "producer");
    Thread consumer = new Thread(() -> {
      try {
        consume(cf, queue, drainMs);
      } catch (Throwable e) {
        consumerError = e.toString();
      }
    }, "consumer");
    Thread progress = new Thread(() -> {
      while (!Thread.currentThread().isInterrupted()) {
        System.out.println("{\"event\":\"progress\",\"acked\":" + acked.get() + ",\"received\":" + received.get()
            + ",\"producerInterrupted\":" + producerLink.interrupted.get() + ",\"producerRestored\":" + producerLink.restored.get()
            + ",\"consumerInterrupted\":" + consumerLink.interrupted.get() + ",\"consumerRestored\":" + consumerLink.restored.get() + "}");
        System.out.flush();
        try {
          Thread.sleep(200);
        } catch (InterruptedException e) {
          return;
        }
      }
    }, "progress");
    progress.setDaemon(true);
    producer.start();
    consumer.start();
    progress.start();

    BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
    for (String line; (line = in.readLine()) != null; ) if (line.trim().equals("stop")) break;
    stop = true;
    producer.join();
    consumer.join();
    progress.interrupt();
    progress.join();
    System.out.println(result());
    System.exit(0);
  }

  static void produce(JmsConnectionFactory cf, String queue) throws Exception {
    JmsConnection connection = (JmsConnection) cf.createConnection();
    connection.addConnectionListener(producerLink);
    try {
      connection.start();
      Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
      MessageProducer producer = session.createProducer(session.createQueue(queue));
      producer.setDeliveryMode(DeliveryMode.PERSISTENT);
      for (int seq = 0; !stop; seq++) {
        TextMessage m = session.createTextMessage("message " + seq);
        m.setIntProperty("seq", seq);
        int interruptionsBefore = producerLink.interrupted.get();
        boolean downBefore = producerLink.down;
        try {
          producer.send(m);
          ackedSeqs.add(seq);
          acked.incrementAndGet();
        } catch (JMSException e) {
          failedSends.put(seq, e.toString());
        }
        if (downBefore || producerLink.interrupted.get() != interruptionsBefore || failedSends.containsKey(seq)) inDoubt.add(seq);
        Thread.sleep(2); // a steady load, not a flood: the machine is shared
      }
    } finally {
      connection.close();
    }
  }

  static void consume(JmsConnectionFactory cf, String queue, long drainMs) throws Exception {
    JmsConnection connection = (JmsConnection) cf.createConnection();
    connection.addConnectionListener(consumerLink);
    try {
      connection.start();
      Session session = connection.createSession(false, Session.CLIENT_ACKNOWLEDGE);
      MessageConsumer consumer = session.createConsumer(session.createQueue(queue));
      long drainUntil = Long.MAX_VALUE;
      int unacknowledged = 0;
      Message last = null;
      for (;;) {
        if (stop && drainUntil == Long.MAX_VALUE) drainUntil = System.currentTimeMillis() + drainMs;
        if (stop && (System.currentTimeMillis() > drainUntil || everyAckedArrived())) break;
        Message m = consumer.receive(200);
        if (m == null) continue;
        last = m;
        int seq = m.getIntProperty("seq");
        arrivals.computeIfAbsent(seq, k -> Collections.synchronizedList(new ArrayList<>()))
            .add(consumerLink.interrupted.get() + (consumerLink.down ? "d" : "") + (m.getJMSRedelivered() ? "r" : ""));
        received.incrementAndGet();
        if (++unacknowledged == 10) {
          m.acknowledge();
          unacknowledged = 0;
        }
      }
      if (last != null) last.acknowledge();
    } finally {
      connection.close();
    }
  }

  static boolean everyAckedArrived() {
    for (int seq : ackedSeqs) if (!arrivals.containsKey(seq)) return false;
    return true;
  }

  static String result() {
    List<Integer> missing = new ArrayList<>();
    for (int seq : ackedSeqs) if (!arrivals.containsKey(seq)) missing.add(seq);
    Collections.sort(missing);
    StringBuilder dups = new StringBuilder("{");
    new TreeMap<>(arrivals).forEach((seq, list) -> {
      if (list.size() < 2) return;
      if (dups.length() > 1) dups.append(',');
      dups.append('"').append(seq).append("\":").append(Json.of(list));
    });
    return "{\"event\":\"result\",\"acked\":" + acked.get() + ",\"received\":" + received.get()
        + ",\"distinct\":" + arrivals.size() + ",\"missing\":" + missing
        + ",\"duplicates\":" + dups.append('}') + ",\"inDoubt\":" + new TreeSet<>(inDoubt)
        + ",\"failedSends\":" + Json.of(new ArrayList<>(new TreeMap<>(failedSends).entrySet()))
        + ",\"producerError\":" + Json.of(producerError) + ",\"consumerError\":" + Json.of(consumerError)
        + ",\"producerEvents\":" + Json.of(producerLink.events) + ",\"consumerEvents\":" + Json.of(consumerLink.events) + "}";
  }
}
