// A member of a consumer group with Kafka's own Java client (kafka-clients 4.x, the classic
// protocol): subscribe(TOPIC) in GROUP, poll, print each record processed, commitSync after each
// poll and when partitions are revoked (so a rebalance hands them over without duplicates), and
// leave (close) once EXPECTED records were seen by the whole group: the member stops when it has
// had no record for IDLE_MS after its first assignment. Prints "assigned <partitions>" on each
// assignment, "record <partition> <offset> <value>" per record, then "done".
// Run as a single-file source program:
//   java -cp <jars> JavaGroupMember.java BOOTSTRAP TOPIC GROUP IDLE_MS
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class JavaGroupMember {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        long idleMs = Long.parseLong(args[3]);
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        c.put("session.timeout.ms", "6000");
        c.put("heartbeat.interval.ms", "500");
        c.put("request.timeout.ms", "10000");
        try (KafkaConsumer<String, String> consumer =
                new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                    consumer.commitSync();
                }

                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    System.out.println("assigned " + parts.stream()
                            .map(TopicPartition::partition).sorted().toList());
                }
            });
            long deadline = System.currentTimeMillis() + 120_000;
            long lastRecord = -1;
            while (System.currentTimeMillis() < deadline) {
                var records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> r : records) {
                    System.out.println("record " + r.partition() + " " + r.offset() + " " + r.value());
                }
                if (!records.isEmpty()) {
                    consumer.commitSync();
                    lastRecord = System.currentTimeMillis();
                } else if (!consumer.assignment().isEmpty() && lastRecord < 0) {
                    lastRecord = System.currentTimeMillis();
                }
                if (lastRecord > 0 && System.currentTimeMillis() - lastRecord > idleMs) {
                    break;
                }
            }
        }
        System.out.println("done");
    }
}
