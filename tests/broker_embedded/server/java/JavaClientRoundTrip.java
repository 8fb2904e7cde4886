// Kafka's own Java client (kafka-clients 4.x) against `kafkalog serve`: an idempotent acks=all
// producer sends COUNT records, then a consumer (assign, from the beginning, no group) reads them
// back with fetch sessions (the Java consumer's default: a full fetch, then incremental ones).
// Prints one line per record read, "offset<TAB>key<TAB>value<TAB>header", then "done".
// Run as a single-file source program: java -cp <jars> JavaClientRoundTrip.java BOOTSTRAP TOPIC COUNT CODEC
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class JavaClientRoundTrip {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], codec = args[3];
        int count = Integer.parseInt(args[2]);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", "all");
        p.put("enable.idempotence", "true");
        p.put("compression.type", codec);
        p.put("linger.ms", "5");
        p.put("delivery.timeout.ms", "30000");
        p.put("request.timeout.ms", "10000");
        try (KafkaProducer<String, String> producer =
                new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < count; i++) {
                ProducerRecord<String, String> r =
                        new ProducerRecord<>(topic, 0, "k" + i, "value " + i + " " + codec);
                r.headers().add("h", ("java-" + i).getBytes(StandardCharsets.UTF_8));
                producer.send(r);
            }
            producer.flush();
        }
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("enable.auto.commit", "false");
        c.put("fetch.max.wait.ms", "100");
        c.put("max.partition.fetch.bytes", "4096"); // many fetches: the session goes incremental
        c.put("request.timeout.ms", "10000");
        TopicPartition tp = new TopicPartition(topic, 0);
        int read = 0;
        long deadline = System.currentTimeMillis() + 60_000;
        try (KafkaConsumer<String, String> consumer =
                new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer())) {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            while (read < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    String h = new String(r.headers().lastHeader("h").value(), StandardCharsets.UTF_8);
                    System.out.println(r.offset() + "\t" + r.key() + "\t" + r.value() + "\t" + h);
                    read++;
                }
            }
        }
        System.out.println("done");
    }
}
